"""LOAD DATA LOCAL INFILE against MariaDB's, through PyMySQL (local_infile=True).

Usage: load_data.py KURA_SQL_PORT MARIADB_PORT DIR

Files written to DIR are loaded into the same tables of both servers: a CSV with
enclosed fields, doubled and escaped quotes, commas and line ends inside quotes,
NULLs, a header line skipped, a duplicate key (skipped, as LOCAL does) and CRLF
lines; the same with REPLACE; MySQL's default format (tabs, backslash escapes, \\N);
a column list naming fewer columns (the rest take their defaults); 2,500 rows (five
batches). Each statement's rows affected (REPLACE's aside: each engine counts rows
replaced its own way) and the tables' rows must be the same. A
client that did not enable local files gets 3948 from Kura and loads nothing.

Exits non-zero with the failing check.
"""
import os
import sys

from peer import connect, mariadb_database, run, verdict


def main(kura_port, mariadb_port, folder):
    files = {
        "quoted.csv": b'id,name,score\r\n1,"ann, a",10\r\n2,bob,NULL\r\n3,"say ""hi"" \\"ok\\"",30\r\n'
                      b'1,dup,99\r\n4,\\N,40\r\n5,"two\r\nlines",50\r\n',
        "tabs.txt": b"10\ttab\\there\t1\n11\t\\N\t2\n12\tback\\\\slash\t3\n",
        "short.csv": b"20,x\n21,y\n",
        "many.csv": b"".join(b"%d,name%d,%d\n" % (i, i, i * 7) for i in range(1000, 3500)),
    }
    for name, data in files.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
    path = lambda name: os.path.join(folder, name).replace("\\", "\\\\")
    csv = "FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"'"
    statements = [
        "DROP TABLE IF EXISTS ld",
        "CREATE TABLE ld (id INT PRIMARY KEY, name VARCHAR(20), score INT DEFAULT 5)",
        f"LOAD DATA LOCAL INFILE '{path('quoted.csv')}' INTO TABLE ld {csv} LINES TERMINATED BY '\\r\\n' IGNORE 1 LINES",
        "SELECT * FROM ld ORDER BY id",
        # (Rows affected by REPLACE are each engine's count of rows replaced in
        # place or deleted and inserted: the rows after it are compared.)
        "*" + f"LOAD DATA LOCAL INFILE '{path('quoted.csv')}' REPLACE INTO TABLE ld {csv} LINES TERMINATED BY '\\r\\n' IGNORE 1 LINES",
        "SELECT * FROM ld ORDER BY id",
        f"LOAD DATA LOCAL INFILE '{path('tabs.txt')}' INTO TABLE ld",
        f"LOAD DATA LOCAL INFILE '{path('short.csv')}' INTO TABLE ld FIELDS TERMINATED BY ',' (id, name)",
        "SELECT * FROM ld WHERE id >= 10 ORDER BY id",
        f"LOAD DATA LOCAL INFILE '{path('many.csv')}' INTO TABLE ld FIELDS TERMINATED BY ','",
        "SELECT count(*), sum(score), min(id), max(id) FROM ld",
        "DROP TABLE ld",
    ]
    kura = connect(kura_port, "kura", local_infile=True)
    mariadb = mariadb_database(mariadb_port, "ld", local_infile=True)
    failed = 0
    for s in statements:
        status_only = s.startswith("*")
        s = s.lstrip("*")
        k, m = run(kura, s), run(mariadb, s)
        if status_only:
            k, m = k[0], m[0]
        if k != m:
            failed += 1
            print(f"{s}\n  kura:    {k}\n  mariadb: {m}")
    run(kura, "CREATE TABLE ld2 (id INT PRIMARY KEY)")
    refused = run(connect(kura_port, "kura"),
                  f"LOAD DATA LOCAL INFILE '{path('short.csv')}' INTO TABLE ld2")
    if refused != ("error", 3948) or run(kura, "SELECT count(*) FROM ld2") != ("ok", 1, [(0,)]):
        failed += 1
        print(f"without local files: {refused}")
    verdict(failed, len(statements) + 1)


main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
