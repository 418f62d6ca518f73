-- The tables the transcripts in this directory run against (kura --schema).
CREATE TABLE players (
  id INT NOT NULL,
  name VARCHAR(16) NOT NULL,
  email VARCHAR(40),
  level INT NOT NULL DEFAULT 1,
  PRIMARY KEY (id),
  UNIQUE KEY email (email),
  KEY level (level)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE items (
  sku CHAR(8) PRIMARY KEY,
  price DOUBLE,
  note TEXT,
  data BLOB
) COMMENT='separator=,';

CREATE TABLE tags (name VARCHAR(20) PRIMARY KEY);

CREATE TABLE scores (id INT, points INT, PRIMARY KEY (id) USING BTREE);

CREATE TABLE prices (
  code DECIMAL(6,2) PRIMARY KEY,
  amount DECIMAL(10,3) NOT NULL DEFAULT 0,
  ref DECIMAL(4,0),
  UNIQUE KEY ref (ref),
  KEY amount (amount) USING BTREE
);
