"""Kura's SQL against MariaDB: the same tables and rows in both, then many generated
SELECTs sent to both, whose results must be equal.

Usage: differential.py KURA_SQL_PORT MARIADB_PORT [--seed N] [--queries N]

Both servers get the same CREATE TABLE statements (MariaDB's tables are
`utf8mb4_nopad_bin`, so text compares and sorts byte by byte, trailing spaces
included, as Kura's does: docs/sql.md) and the same
seeded-random rows: NULLs, negative numbers, zero, duplicates in non-unique
columns, text with shared prefixes and of differing lengths, a unique email, ordered
`KEY`s on INT, DOUBLE and VARCHAR columns, a `USING BTREE` primary key and unique
index, a hashed text primary key, a second and third table referring to the first.
Then a generator seeded with the same seed writes SELECTs: WHERE with = <> != < <=
> >= <=> BETWEEN IN LIKE IS [NOT] NULL under AND/OR/NOT, on every column type and
on primary keys, unique and ordered indexes and plain columns, so that every plan
Kura has (lookup, range, ordered read, scan) answers; ORDER BY with LIMIT and
OFFSET; COUNT, SUM, MIN, MAX, AVG with and without GROUP BY and HAVING; DISTINCT;
inner and left joins of two and three tables; IN, NOT IN, EXISTS and scalar
subqueries. Literals are written as PyMySQL writes parameters (bytes as
`_binary X'..'`, floats as `1.5e0`), and now and then as applications also write
them: a quoted number, a DECIMAL literal, a LIKE wildcard escaped with a
backslash.

Results are compared as lists, in order, when the ORDER BY makes the order total
(it then ends with the primary keys of the tables in the query). An ORDER BY
without them (a partial order, its terms selected too) fixes the order of its
terms' values only: those are compared in order, and the rows as multisets unless
a LIMIT cuts them. Without ORDER BY the rows are compared as multisets, and no
LIMIT is generated. Values must be equal in type and value (floats by repr),
except where MySQL's types legitimately differ from Kura's in representation: SUM
of integers is a DECIMAL in MariaDB (compared exactly, as an integer), AVG of
integers is MariaDB's DECIMAL with 4 decimals where Kura gives a DOUBLE (docs/sql.md;
compared to 0.00005), and SUM and AVG of DOUBLEs may be summed in another order
(compared to 1e-9 relative).

Left out as documented differences (docs/sql.md): `/` and other expressions whose
MySQL result is a DECIMAL (Kura's is a DOUBLE), MySQL functions SQLite lacks, a
quoted string compared with a BLOB column, LIKE on a BLOB column, BIGINT UNSIGNED
values above 2**63 - 1. A SUM past BIGINT's range is Kura's DOUBLE (compared as
close as a double holds it).
Left out as not comparable: LIMIT without an ORDER BY, and GROUP BY, DISTINCT, MIN,
MAX or a partial ORDER BY on a column holding values that differ only in trailing
spaces (MariaDB's PAD SPACE collation makes them one value and returns either).

On a difference it prints the seed, the query, both results, and the query reduced
to a smaller one that still differs; exits 1 after running every query, or at
once if Kura's connection breaks.
"""

import argparse
import copy
import decimal
import math
import random
import sys
import time

import pymysql
from pymysql.converters import escape_item

DEFAULT_SEED = 20261123
DEFAULT_QUERIES = 1500
# Examples printed, and queries reduced, per class of query that differs.
SHOWN_PER_CLASS = 3
REDUCE_STEPS_MAX = 200

# Kura accepts and ignores these (docs/tables.md); they make MariaDB's text compare
# and sort by its bytes, as Kura's does.
TABLE_OPTIONS = " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin"


class Raw:
    """A literal written as is (a quoted number, a DECIMAL literal)."""

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


def lit(value):
    """A value as PyMySQL sends it as a parameter (bytes as `_binary X'..'`)."""
    if isinstance(value, Raw):
        return value.text
    return escape_item(value, "utf8mb4")


# Column kinds.
INT, UINT, BIGINT, UBIGINT, DOUBLE, VARCHAR, CHAR, TEXT, BLOB = (
    "int",
    "uint",
    "bigint",
    "ubigint",
    "double",
    "varchar",
    "char",
    "text",
    "blob",
)
INTEGERS = (INT, UINT, BIGINT, UBIGINT)
STRINGS = (VARCHAR, CHAR, TEXT)
RANGES = {
    INT: (-(2**31), 2**31 - 1),
    UINT: (0, 2**32 - 1),
    BIGINT: (-(2**63), 2**63 - 1),
    UBIGINT: (0, 2**64 - 1),
}


class Column:
    def __init__(self, name, kind, index=None, padded=False):
        self.name = name
        self.kind = kind
        # "pk", "unique", "key" (ordered) or None.
        self.index = index
        # Holds values that differ only in trailing spaces (not comparable under
        # GROUP BY, DISTINCT, MIN, MAX: MariaDB returns either spelling).
        self.padded = padded
        self.values = []


class Table:
    def __init__(self, name, alias, ddl, columns):
        self.name = name
        self.alias = alias
        self.ddl = ddl
        self.columns = columns
        self.rows = []

    @property
    def pk(self):
        return next(c for c in self.columns if c.index == "pk")

    def column(self, name):
        return next(c for c in self.columns if c.name == name)


def make_tables():
    players = Table(
        "players",
        "p",
        "CREATE TABLE players (id INT NOT NULL, name VARCHAR(32) NOT NULL, "
        "email VARCHAR(64), level INT NOT NULL DEFAULT 1, score DOUBLE, balance BIGINT, "
        "flags INT UNSIGNED NOT NULL DEFAULT 0, big BIGINT UNSIGNED, tag CHAR(8), "
        "bio TEXT, avatar BLOB, PRIMARY KEY (id), UNIQUE KEY email (email), "
        "KEY level (level) USING BTREE, KEY name (name), KEY score (score))",
        [
            Column("id", INT, "pk"),
            Column("name", VARCHAR, "key"),
            Column("email", VARCHAR, "unique"),
            Column("level", INT, "key"),
            Column("score", DOUBLE, "key"),
            Column("balance", BIGINT),
            Column("flags", UINT),
            Column("big", UBIGINT),
            Column("tag", CHAR),
            Column("bio", TEXT, padded=True),
            Column("avatar", BLOB),
        ],
    )
    games = Table(
        "games",
        "g",
        "CREATE TABLE games (id BIGINT NOT NULL, player_id INT, points INT NOT NULL, "
        "kind VARCHAR(16) NOT NULL, code VARCHAR(20), ratio DOUBLE NOT NULL, "
        "PRIMARY KEY (id) USING BTREE, KEY player_id (player_id), "
        "UNIQUE KEY code (code) USING BTREE)",
        [
            Column("id", BIGINT, "pk"),
            Column("player_id", INT, "key"),
            Column("points", INT),
            Column("kind", VARCHAR),
            Column("code", VARCHAR, "unique"),
            Column("ratio", DOUBLE),
        ],
    )
    items = Table(
        "items",
        "i",
        "CREATE TABLE items (sku VARCHAR(24) NOT NULL PRIMARY KEY, price DOUBLE NOT NULL, "
        "qty INT, owner INT, label TEXT NOT NULL, KEY price (price))",
        [
            Column("sku", VARCHAR, "pk"),
            Column("price", DOUBLE, "key"),
            Column("qty", INT),
            Column("owner", INT),
            Column("label", TEXT),
        ],
    )
    return [players, games, items]


NAME_STEMS = ["al", "alex", "Alex", "alexa", "alexander", "bo", "bob", "Bob", "bobby",
              "b", "c", "cy", "zed", "Zed", "zz", "mo", "mo-", "mo.b", ""]
NAME_TAILS = ["", "", "", "a", "s", "son", "1", "2", "10", "x", "X", "-b"]
WORDS = ["red", "green", "blue", "bl", "blu", "z", "Zeta", "a", "ab", "abc", "night", "day"]


def rand_text(rng, alphabet="abcxyzABZ019-.@", lo=0, hi=8):
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi)))


def make_rows(rng, tables):
    players, games, items = tables
    ids = rng.sample(range(-300, 6000), 1200)
    # Far apart, so that no two round to one DOUBLE (MySQL compares a quoted
    # number with an integer as DOUBLEs).
    huge = [2**62 + k * 10**7 + rng.randint(0, 1000) for k in range(4)]
    for n, pid in enumerate(ids):
        name = rng.choice(NAME_STEMS) + rng.choice(NAME_TAILS)
        email = None
        if rng.random() > 0.12:
            email = f"{name.lower() or 'anon'}.{pid}@{rng.choice(['x.com', 'x.co', 'mail.org'])}"
        level = int(rng.triangular(-5, 60, 8))
        score = rng.choice([
            None,
            round(rng.uniform(-1000, 1000), 2),
            round(rng.uniform(-5, 5), 2),
            rng.choice([0.0, 1.5, -2.25, 100.0, 0.1, 1e-3, 123456.789]),
        ])
        balance = rng.choice([
            None, 0, -1, 1,
            rng.randint(-10**12, 10**12),
            rng.randint(-1000, 1000),
        ])
        if n < len(huge):
            # SUM over these passes 2**63: MariaDB's DECIMAL sum is exact.
            balance = huge[n]
        flags = rng.choice([0, 1, 7, rng.randint(0, 2**32 - 1), 2**32 - 1, rng.randint(0, 100)])
        big = rng.choice([
            None, 0, 1,
            rng.randint(0, 2**32),
            rng.randint(0, 2**63 - 1),
            # Not above 2**63 - 1: SQLite's expressions hold those as DOUBLEs, a
            # documented difference (docs/sql.md).
        ])
        tag = rng.choice([None, "", "A", "a", "B", "b1", "b10", "b2", "xx", "XX-1", rand_text(rng, hi=8)])
        bio = None
        if rng.random() > 0.2:
            bio = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4)))
            if rng.random() < 0.05:
                # The same words with a trailing space: equal to the spelling without
                # it under MySQL's PAD SPACE collations, utf8mb4_bin included.
                bio += " "
        avatar = rng.choice([
            None,
            b"",
            bytes(rng.randint(0, 255) for _ in range(rng.randint(1, 6))),
            rng.choice([b"ab", b"abc", b"b", b"\x00", b"\xff\x00", b"zz"]),
        ])
        players.rows.append([pid, name, email, level, score, balance, flags, big, tag, bio, avatar])

    game_ids = rng.sample(range(-2000, 200000), 2400)
    codes = rng.sample(range(0, 100000), 2400)
    for gid, code_n in zip(game_ids, codes):
        player_id = rng.choice(ids)
        r = rng.random()
        if r < 0.05:
            player_id = None
        elif r < 0.15:
            player_id = rng.randint(6000, 7000)
        points = rng.choice([rng.randint(-100, 1000), rng.randint(0, 10), 0])
        kind = rng.choice(["duel", "raid", "Raid", "race", "quest", "q", ""])
        code = None
        if rng.random() > 0.05:
            code = rng.choice(["g", "g-", "ga", "gb", "G", "gab"]) + str(code_n)
        ratio = rng.choice([round(rng.uniform(0, 10), 3), float(rng.randint(0, 5)), 0.5])
        games.rows.append([gid, player_id, points, kind, code, ratio])

    skus = rng.sample(range(0, 10000), 400)
    for s in skus:
        sku = rng.choice(["sw", "sh", "sw_", "pot", "po", "p%"]) + str(s)
        price = rng.choice([round(rng.uniform(0, 500), 2), 9.99, 0.0, 1.0])
        qty = rng.choice([None, 0, rng.randint(-5, 100)])
        owner = rng.choice([None, rng.choice(ids), rng.randint(6000, 6100)])
        label = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))
        items.rows.append([sku, price, qty, owner, label])

    for table in tables:
        for i, column in enumerate(table.columns):
            column.values = sorted(
                {row[i] for row in table.rows if row[i] is not None},
                key=lambda v: (type(v).__name__, v),
            )


def load_literal(value):
    # Rows are loaded with plain hex literals for bytes: how a query's `_binary`
    # literal fares is for the queries to find out, not the load.
    if isinstance(value, bytes):
        return "X'" + value.hex() + "'"
    return lit(value)


def load(cursor, tables):
    cursor.execute("SET autocommit = 1")
    for table in tables:
        cursor.execute(table.ddl + TABLE_OPTIONS)
        names = ", ".join(c.name for c in table.columns)
        for start in range(0, len(table.rows), 200):
            chunk = table.rows[start : start + 200]
            values = ", ".join(
                "(" + ", ".join(load_literal(v) for v in row) + ")" for row in chunk
            )
            cursor.execute(f"INSERT INTO {table.name} ({names}) VALUES {values}")


# ----- queries -------------------------------------------------------------------------

# How a result column's values are compared.
EXACT = "exact"  # same type, same value (floats by repr)
SUMINT = "sumint"  # an integer, or MariaDB's integral DECIMAL
AVGINT = "avgint"  # MariaDB's DECIMAL(.., 4) against a DOUBLE
APPROX = "approx"  # a DOUBLE summed in another order


class Query:
    """A SELECT in parts, so that a differing one can be made smaller."""

    def __init__(self, cls, from_sql, pks):
        self.cls = cls
        self.distinct = False
        self.select = []  # (sql, comparison)
        self.from_sql = from_sql
        self.pks = pks  # ORDER BY terms that make any order total
        self.where = None  # condition tree
        self.group = []
        self.having = None
        # (sql, direction, needed): needed terms keep the order total. Without the
        # primary keys the order is partial: then only the ORDER BY terms' values,
        # which are selected too, are compared in order.
        self.order = []
        self.total = False  # whether `order` is a total order
        self.limit = None  # (count, offset or None, MySQL's "LIMIT offset, count")

    def sql(self):
        parts = ["SELECT "]
        if self.distinct:
            parts.append("DISTINCT ")
        parts.append(", ".join(s for s, _ in self.select))
        parts.append(" FROM " + self.from_sql)
        if self.where is not None:
            parts.append(" WHERE " + render(self.where))
        if self.group:
            parts.append(" GROUP BY " + ", ".join(self.group))
        if self.having is not None:
            parts.append(" HAVING " + render(self.having))
        if self.order:
            parts.append(" ORDER BY " + ", ".join(f"{s} {d}".rstrip() for s, d, _ in self.order))
        if self.limit is not None:
            count, offset, comma = self.limit
            if offset is None:
                parts.append(f" LIMIT {count}")
            elif comma:
                parts.append(f" LIMIT {offset}, {count}")
            else:
                parts.append(f" LIMIT {count} OFFSET {offset}")
        return "".join(parts)

    @property
    def ordered(self):
        return bool(self.order) and self.total

    def key_positions(self):
        """Where a partial order's terms are in the select list (None: one is not)."""
        names = [sql for sql, _ in self.select]
        if "*" in names:
            return None
        try:
            return [names.index(sql) for sql, _, _ in self.order]
        except ValueError:
            return None


def render(cond):
    op = cond[0]
    if op == "leaf":
        return cond[1]
    if op == "not":
        return "NOT (" + render(cond[1]) + ")"
    joiner = " AND " if op == "and" else " OR "
    return "(" + joiner.join(render(c) for c in cond[1]) + ")"


class Generator:
    def __init__(self, rng, tables):
        self.rng = rng
        self.tables = tables
        self.players, self.games, self.items = tables

    # -- literals --

    def value(self, column):
        """A literal for comparing with `column`: mostly one of its values."""
        rng = self.rng
        kind = column.kind
        if column.values and rng.random() < 0.6:
            v = rng.choice(column.values)
        elif kind in INTEGERS:
            lo, hi = RANGES[kind]
            v = rng.choice([0, 1, -1, lo, hi, rng.randint(-50, 100), rng.randint(lo, hi)])
            if kind in (UINT, UBIGINT) and v < 0:
                v = -v
        elif kind == DOUBLE:
            v = rng.choice([0.0, 1.5, -1.0, round(rng.uniform(-1000, 1000), 2), 7.0])
        elif kind == BLOB:
            v = rng.choice([b"", b"a", b"ab", b"\x80", bytes([rng.randint(0, 255)])])
        else:
            base = rng.choice(column.values) if column.values else ""
            v = rng.choice([
                "",
                base[: rng.randint(0, len(base))],
                base + rng.choice(["a", "0", "-", "~"]),
                rand_text(rng, lo=1, hi=4),
            ])
        # The spellings applications send besides PyMySQL's own.
        if kind in INTEGERS and rng.random() < 0.06:
            return Raw(f"'{v}'")  # a quoted number
        if kind == DOUBLE and rng.random() < 0.2:
            return Raw(f"{v!r}".replace("e+", "E"))  # a DECIMAL literal
        # Not generated: a quoted string compared with a BLOB column (SQLite never
        # finds a BLOB equal to a TEXT; docs/sql.md).
        return v

    def like_pattern(self, column):
        rng = self.rng
        base = rng.choice(column.values) if column.values else "a"
        if isinstance(base, bytes):
            # ASCII patterns only: a byte past 127 would be a character to MariaDB.
            base = "".join(chr(b) if 32 <= b < 127 else "_" for b in base)
        n = len(base)
        a = rng.randint(0, n)
        b = rng.randint(a, n)
        choice = rng.randint(0, 7)
        if choice == 0:
            p = base[:a] + "%"
        elif choice == 1:
            p = "%" + base[a:]
        elif choice == 2:
            p = "%" + base[a:b] + "%"
        elif choice == 3:
            p = "".join("_" if rng.random() < 0.3 else ch for ch in base)
        elif choice == 4:
            p = base[:a] + "_%"
        elif choice == 5:
            p = rng.choice(["%", "_", "__", "%_%", "", "a%", "A%"])
        elif choice == 6:
            # A wildcard escaped with MySQL's default escape, the backslash, as ORMs
            # write a user's "contains" search.
            p = base[:a].replace("%", "\\%").replace("_", "\\_") + "%"
        else:
            p = base
        return Raw(lit(p))

    # -- conditions --

    def leaf(self, refs):
        """A condition on one column: refs are (sql, Column)."""
        rng = self.rng
        ref, column = rng.choice(refs)
        kind = column.kind
        r = rng.random()
        if r < 0.40:
            op = rng.choice(["=", "=", "<>", "!=", "<", "<=", ">", ">="])
            return ("leaf", f"{ref} {op} {lit(self.value(column))}")
        if r < 0.50:
            lo, hi = self.value(column), self.value(column)
            if not isinstance(lo, Raw) and not isinstance(hi, Raw) and type(lo) is type(hi):
                if rng.random() < 0.85 and hi < lo:
                    lo, hi = hi, lo
            neg = "NOT " if rng.random() < 0.2 else ""
            return ("leaf", f"{ref} {neg}BETWEEN {lit(lo)} AND {lit(hi)}")
        if r < 0.62:
            items = [self.value(column) for _ in range(rng.randint(1, 6))]
            if rng.random() < 0.1:
                items.append(None)
            neg = "NOT " if rng.random() < 0.2 else ""
            return ("leaf", f"{ref} {neg}IN ({', '.join(lit(v) for v in items)})")
        # Not on a BLOB: SQLite's LIKE reads a BLOB as text (stopping at a NUL, a
        # character of several bytes), MariaDB's byte by byte (docs/sql.md).
        if r < 0.74 and kind in STRINGS:
            neg = "NOT " if rng.random() < 0.2 else ""
            return ("leaf", f"{ref} {neg}LIKE {lit(self.like_pattern(column))}")
        if r < 0.84:
            neg = "NOT " if rng.random() < 0.5 else ""
            return ("leaf", f"{ref} IS {neg}NULL")
        if r < 0.89:
            # MySQL's NULL-safe equality.
            v = None if rng.random() < 0.3 else self.value(column)
            return ("leaf", f"{ref} <=> {lit(v)}")
        # Two columns of one family.
        family = [
            (s, c)
            for s, c in refs
            if (c.kind in INTEGERS + (DOUBLE,)) == (kind in INTEGERS + (DOUBLE,))
            and (c.kind == BLOB) == (kind == BLOB)
            and s != ref
        ]
        if family:
            other, _ = rng.choice(family)
            op = rng.choice(["=", "<>", "<", "<=", ">", ">="])
            return ("leaf", f"{ref} {op} {other}")
        return ("leaf", f"{ref} IS NOT NULL")

    def cond(self, refs, depth=0):
        rng = self.rng
        r = rng.random()
        if depth >= 2 or r < 0.45:
            return self.leaf(refs)
        if r < 0.85:
            op = rng.choice(["and", "and", "or"])
            return (op, [self.cond(refs, depth + 1) for _ in range(rng.randint(2, 3))])
        return ("not", self.cond(refs, depth + 1))

    # -- order and limit --

    def order_and_limit(self, q, refs, pk_refs, limit_chance=0.6):
        """An ORDER BY that ends with the primary keys, or now and then a partial
        one (its terms then selected too), and maybe a LIMIT."""
        rng = self.rng
        partial = rng.random() < 0.3 and all(sql != "*" for sql, _ in q.select)
        for ref, column in rng.sample(refs, rng.randint(1 if partial else 0, min(2, len(refs)))):
            if column.padded:
                continue
            q.order.append((ref, rng.choice(["", "ASC", "DESC"]), False))
            if partial and all(sql != ref for sql, _ in q.select):
                q.select.append((ref, EXACT))
        if not partial or not q.order:
            for ref in pk_refs:
                q.order.append((ref, rng.choice(["", "ASC", "DESC"]), True))
        q.total = not partial or q.order[-1][2]
        if rng.random() < limit_chance:
            self.limit(q)

    def limit(self, q):
        rng = self.rng
        count = rng.choice([0, 1, 2, 5, 10, 20, 50, 200])
        offset = None
        if rng.random() < 0.5:
            offset = rng.choice([0, 1, 3, 10, 100, 1000, 5000])
        q.limit = (count, offset, rng.random() < 0.3)

    # -- query classes --

    def refs(self, table, qualified):
        prefix = table.alias + "." if qualified else ""
        return [(prefix + c.name, c) for c in table.columns]

    def filter_query(self):
        """Rows of one table by a condition, in a total order or none."""
        rng = self.rng
        table = rng.choice([self.players, self.players, self.games, self.items])
        refs = self.refs(table, False)
        q = Query("filter " + table.name, table.name, [table.pk.name])
        if rng.random() < 0.15:
            q.select = [("*", EXACT)]
        else:
            q.select = [(s, EXACT) for s, _ in rng.sample(refs, rng.randint(1, 4))]
        if rng.random() < 0.1:
            q.select.append(self.expression(refs))
        q.where = self.cond(refs)
        if rng.random() < 0.6:
            self.order_and_limit(q, refs, [table.pk.name])
        return q

    def index_order_query(self):
        """A range on an index (ordered or not) read in its order, often cut by a LIMIT."""
        rng = self.rng
        table = rng.choice([self.players, self.players, self.games, self.items])
        candidates = [c for c in table.columns if c.index is not None]
        column = rng.choice(candidates)
        q = Query("index order " + table.name, table.name, [table.pk.name])
        q.select = [(table.pk.name, EXACT), (column.name, EXACT)]
        lo, hi = self.value(column), self.value(column)
        shape = rng.randint(0, 5)
        if shape == 0:
            q.where = ("leaf", f"{column.name} >= {lit(lo)}")
        elif shape == 1:
            q.where = ("leaf", f"{column.name} < {lit(hi)}")
        elif shape == 2:
            q.where = ("leaf", f"{column.name} BETWEEN {lit(lo)} AND {lit(hi)}")
        elif shape == 4 and column.kind in STRINGS:
            # A prefix read from the index, or a pattern it cannot narrow.
            q.where = ("leaf", f"{column.name} LIKE {self.like_pattern(column)}")
        elif shape == 5:
            items = [self.value(column) for _ in range(rng.randint(1, 5))]
            q.where = ("leaf", f"{column.name} IN ({', '.join(lit(v) for v in items)})")
        direction = rng.choice(["", "ASC", "DESC"])
        q.order = [(column.name, direction, column is table.pk)]
        q.total = column is table.pk
        # Often the index's column alone, as applications write it: the values'
        # order is still fixed, if not the rows'.
        if column is not table.pk and rng.random() < 0.5:
            q.order.append((table.pk.name, rng.choice(["", direction]), True))
            q.total = True
        if rng.random() < 0.8:
            self.limit(q)
        return q

    def expression(self, refs):
        rng = self.rng
        ints = [s for s, c in refs if c.kind in (INT, BIGINT) and not s.endswith("balance")]
        doubles = [s for s, c in refs if c.kind == DOUBLE]
        texts = [s for s, c in refs if c.kind in (VARCHAR, CHAR)]
        options = []
        if ints:
            a, b = rng.choice(ints), rng.choice(ints)
            options += [f"{a} + {b}", f"{a} - 3", f"-{a}", f"{a} * 2", f"ABS({a})", f"{a} > 5"]
        if doubles:
            d = rng.choice(doubles)
            options += [f"{d} * 2", f"COALESCE({d}, 0e0)", f"{d} + 1"]
        if texts:
            t = rng.choice(texts)
            options += [f"LENGTH({t})", f"UPPER({t})", f"LOWER({t})", f"IFNULL({t}, 'none')"]
        return (rng.choice(options), EXACT)

    def aggregates(self, refs):
        rng = self.rng
        out = []
        for _ in range(rng.randint(1, 4)):
            ref, column = rng.choice(refs)
            kind = column.kind
            choices = [("COUNT(*)", EXACT), (f"COUNT({ref})", EXACT)]
            if not column.padded:
                choices += [
                    (f"MIN({ref})", EXACT),
                    (f"MAX({ref})", EXACT),
                    (f"COUNT(DISTINCT {ref})", EXACT),
                ]
            if kind in INTEGERS:
                choices += [(f"SUM({ref})", SUMINT), (f"AVG({ref})", AVGINT)] * 2
            if kind == DOUBLE:
                choices += [(f"SUM({ref})", APPROX), (f"AVG({ref})", APPROX)] * 2
            out.append(rng.choice(choices))
        return out

    def aggregate_query(self):
        """Aggregates over a whole table or a condition's rows: one row."""
        rng = self.rng
        table = rng.choice(self.tables)
        refs = self.refs(table, False)
        q = Query("aggregate " + table.name, table.name, [])
        q.select = self.aggregates(refs)
        if rng.random() < 0.8:
            q.where = self.cond(refs)
        return q

    def group_query(self):
        """GROUP BY one or two columns, with HAVING, in the groups' order or none."""
        rng = self.rng
        table = rng.choice([self.players, self.players, self.games, self.items])
        refs = self.refs(table, False)
        groupable = [(s, c) for s, c in refs if not c.padded and c is not table.pk]
        keys = rng.sample(groupable, rng.randint(1, 2))
        q = Query("group " + table.name, table.name, [])
        q.select = [(s, EXACT) for s, _ in keys] + self.aggregates(refs)
        q.group = [s for s, _ in keys]
        if rng.random() < 0.5:
            q.where = self.cond(refs)
        if rng.random() < 0.35:
            agg, _ = rng.choice(
                [("COUNT(*)", None)]
                + [(f"SUM({s})", None) for s, c in refs if c.kind in (INT, BIGINT)]
                + [(f"MAX({s})", None) for s, c in refs if c.kind in INTEGERS]
            )
            op = rng.choice([">", ">=", "<", "=", "<>"])
            q.having = ("leaf", f"{agg} {op} {rng.choice([0, 1, 2, 3, 5, 10, 100, 500])}")
        if rng.random() < 0.6:
            q.order = [(s, rng.choice(["", "ASC", "DESC"]), True) for s in q.group]
            if rng.random() < 0.3:
                q.order.insert(0, ("COUNT(*)", rng.choice(["ASC", "DESC"]), False))
            q.total = True
            if rng.random() < 0.4:
                self.limit(q)
        return q

    def distinct_query(self):
        rng = self.rng
        table = rng.choice(self.tables)
        refs = [(s, c) for s, c in self.refs(table, False) if not c.padded]
        chosen = rng.sample(refs, rng.randint(1, 2))
        q = Query("distinct " + table.name, table.name, [])
        q.distinct = True
        q.select = [(s, EXACT) for s, _ in chosen]
        if rng.random() < 0.6:
            q.where = self.cond(self.refs(table, False))
        if rng.random() < 0.6:
            q.order = [(s, rng.choice(["", "DESC"]), True) for s, _ in chosen]
            q.total = True
            if rng.random() < 0.5:
                self.limit(q)
        return q

    JOINS = [
        ("players p JOIN games g ON g.player_id = p.id", ["p", "g"]),
        ("players p LEFT JOIN games g ON g.player_id = p.id", ["p", "g"]),
        ("games g LEFT JOIN players p ON p.id = g.player_id", ["g", "p"]),
        ("items i JOIN players p ON p.id = i.owner", ["i", "p"]),
        ("items i LEFT JOIN players p ON i.owner = p.id", ["i", "p"]),
        ("items i JOIN players p ON p.id = i.owner JOIN games g ON g.player_id = p.id",
         ["i", "p", "g"]),
    ]

    def join_query(self):
        rng = self.rng
        from_sql, aliases = rng.choice(self.JOINS)
        by_alias = {t.alias: t for t in self.tables}
        refs = [r for a in aliases for r in self.refs(by_alias[a], True)]
        pk_refs = [f"{a}.{by_alias[a].pk.name}" for a in aliases]
        if rng.random() < 0.3:
            # Joined rows grouped by a column of the first table.
            q = Query("join group", from_sql, [])
            key_ref, _ = rng.choice(
                [(s, c) for s, c in self.refs(by_alias[aliases[0]], True) if not c.padded]
            )
            q.select = [(key_ref, EXACT)] + self.aggregates(refs)
            q.group = [key_ref]
            if rng.random() < 0.6:
                q.where = self.cond(refs)
            if rng.random() < 0.6:
                q.order = [(key_ref, rng.choice(["", "DESC"]), True)]
                q.total = True
                if rng.random() < 0.4:
                    self.limit(q)
            return q
        q = Query("join", from_sql, pk_refs)
        q.select = [(s, EXACT) for s, _ in rng.sample(refs, rng.randint(1, 4))]
        q.where = self.cond(refs)
        if rng.random() < 0.6:
            self.order_and_limit(q, refs, pk_refs, limit_chance=0.5)
        return q

    def subquery_query(self):
        rng = self.rng
        p_refs = self.refs(self.players, True)
        g_refs = self.refs(self.games, True)
        q = Query("subquery", "players p", ["p.id"])
        q.select = [(s, EXACT) for s, _ in rng.sample(p_refs, rng.randint(1, 3))]
        inner = render(self.cond(g_refs))
        shape = rng.randint(0, 4)
        if shape == 0:
            sub = f"p.id IN (SELECT g.player_id FROM games g WHERE {inner})"
        elif shape == 1:
            sub = f"p.id NOT IN (SELECT g.player_id FROM games g WHERE {inner})"
        elif shape == 2:
            sub = f"EXISTS (SELECT 1 FROM games g WHERE g.player_id = p.id AND {inner})"
        elif shape == 3:
            sub = f"NOT EXISTS (SELECT 1 FROM games g WHERE g.player_id = p.id AND {inner})"
        else:
            agg = rng.choice(["MAX", "MIN"])
            sub = f"p.level >= (SELECT {agg}(g.points) FROM games g WHERE {inner})"
        q.where = ("leaf", sub)
        if rng.random() < 0.5:
            q.where = ("and", [q.where, self.cond(p_refs)])
        if rng.random() < 0.5:
            self.order_and_limit(q, p_refs, ["p.id"])
        return q

    def query(self):
        r = self.rng.random()
        if r < 0.36:
            return self.filter_query()
        if r < 0.44:
            return self.index_order_query()
        if r < 0.56:
            return self.aggregate_query()
        if r < 0.70:
            return self.group_query()
        if r < 0.76:
            return self.distinct_query()
        if r < 0.93:
            return self.join_query()
        return self.subquery_query()


# ----- running and comparing -----------------------------------------------------------


# How run() reports a connection that broke (PyMySQL's 2013, 2006, or no code).
LOST = "connection lost"


def run(cursor, sql):
    """The rows, or the error as a string."""
    try:
        cursor.execute(sql)
        return list(cursor.fetchall())
    except pymysql.MySQLError as e:
        code = e.args[0] if e.args else 0
        text = e.args[1] if len(e.args) > 1 else str(e)
        if code in (0, 2006, 2013) or isinstance(e, pymysql.err.InterfaceError):
            return f"{LOST}: {code} {text}"
        return f"error {code}: {text}"


def same(a, b, how):
    """Whether MariaDB's value `a` and Kura's `b` agree under comparison `how`."""
    if a is None or b is None:
        return a is None and b is None
    if how == EXACT:
        if type(a) is not type(b):
            return False
        return repr(a) == repr(b) if isinstance(a, float) else a == b
    numbers = (int, float, decimal.Decimal)
    if not isinstance(a, numbers) or not isinstance(b, numbers):
        return False
    if how == SUMINT:
        if isinstance(a, decimal.Decimal) and a != a.to_integral_value():
            return False
        # A column of sums one of which left BIGINT's range is Kura's DOUBLE (it has no
        # DECIMAL; docs/sql.md): then as close as a double holds it.
        if isinstance(b, float):
            return math.isclose(float(a), b, rel_tol=1e-15)
        return int(a) == int(b)
    if how == AVGINT:
        return abs(decimal.Decimal(a) - decimal.Decimal(b)) <= decimal.Decimal("0.00005") + abs(
            decimal.Decimal(a)
        ) * decimal.Decimal("1e-12")
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)


def sort_key(row, hows):
    key = []
    for v, how in zip(row, hows):
        if v is None:
            key.append((0, 0))
        elif isinstance(v, (int, float, decimal.Decimal)):
            key.append((1, round(float(v), 3) if how in (AVGINT, APPROX) else v))
        elif isinstance(v, str):
            key.append((2, v))
        else:
            key.append((3, bytes(v)))
    return key


def differ(q, mariadb, kura):
    """Why the two results differ, or None."""
    if isinstance(mariadb, str):
        return f"MariaDB refused the query (a generator error): {mariadb}"
    if isinstance(kura, str):
        return f"Kura: {kura}"
    hows = [how for _, how in q.select]
    if mariadb and any(s == "*" for s, _ in q.select):
        # A star stands for the columns the other items do not.
        stars = len(mariadb[0]) - len(q.select) + 1
        hows = [h for s, how in q.select for h in ([how] * stars if s == "*" else [how])]
    if len(mariadb) != len(kura):
        return f"{len(mariadb)} rows from MariaDB, {len(kura)} from Kura"
    for n, (m, k) in enumerate(zip(mariadb, kura)):
        if len(m) != len(k):
            return f"row {n}: {len(m)} columns from MariaDB, {len(k)} from Kura"
    if q.order and not q.total:
        # A partial order: the ORDER BY terms' values come in one order.
        keys = q.key_positions()
        assert keys is not None, f"a partial order's terms are not all selected: {q.sql()}"
        for n, (m, k) in enumerate(zip(mariadb, kura)):
            for c in keys:
                if not same(m[c], k[c], hows[c]):
                    return f"row {n} (ORDER BY's values in order), column {c + 1}: MariaDB {m[c]!r}, Kura {k[c]!r}"
        if q.limit is not None:
            return None
    if not q.ordered:
        mariadb = sorted(mariadb, key=lambda r: sort_key(r, hows))
        kura = sorted(kura, key=lambda r: sort_key(r, hows))
    for n, (m, k) in enumerate(zip(mariadb, kura)):
        for c, (a, b) in enumerate(zip(m, k)):
            if not same(a, b, hows[c]):
                what = "in order" if q.ordered else "sorted"
                return f"row {n} ({what}), column {c + 1}: MariaDB {a!r}, Kura {b!r}"
    return None


def show(rows, limit=12):
    if isinstance(rows, str):
        return rows
    lines = [repr(tuple(r)) for r in rows[:limit]]
    if len(rows) > limit:
        lines.append(f"... {len(rows)} rows")
    return "\n      ".join(lines) if lines else "(no rows)"


def reductions(q):
    """Smaller versions of q, one change each."""
    def variant(change):
        v = copy.deepcopy(q)
        change(v)
        return v

    out = []
    if q.where is not None:
        out.append(variant(lambda v: setattr(v, "where", None)))
        for sub in subconditions(q.where):
            out.append(variant(lambda v, s=sub: setattr(v, "where", s)))
    if q.having is not None:
        out.append(variant(lambda v: setattr(v, "having", None)))
    if q.limit is not None:
        out.append(variant(lambda v: setattr(v, "limit", None)))
        if q.limit[1] is not None:
            out.append(variant(lambda v: setattr(v, "limit", (v.limit[0], None, False))))
    if q.order and q.limit is None:
        out.append(variant(lambda v: (setattr(v, "order", []), setattr(v, "total", False))))
    for n, (_, _, needed) in enumerate(q.order):
        if not needed and len(q.order) > 1:
            out.append(variant(lambda v, n=n: v.order.pop(n)))
    if len(q.select) > 1 and not q.distinct:
        for n in range(len(q.select)):
            out.append(variant(lambda v, n=n: v.select.pop(n)))
    # A partial order compares its terms' values, so they stay selected.
    return [v for v in out if v.total or not v.order or v.key_positions() is not None]


def subconditions(cond):
    """Conditions a step simpler than `cond`."""
    if cond[0] == "leaf":
        return []
    if cond[0] == "not":
        return [cond[1]]
    children = cond[1]
    out = list(children)
    if len(children) > 2:
        for n in range(len(children)):
            out.append((cond[0], children[:n] + children[n + 1 :]))
    for n, child in enumerate(children):
        for smaller in subconditions(child):
            out.append((cond[0], children[:n] + [smaller] + children[n + 1 :]))
    return out


def reduce(q, mcur, kcur):
    """The smallest version of q found, by greedy steps, whose results still differ."""
    steps = 0
    progress = True
    while progress and steps < REDUCE_STEPS_MAX:
        progress = False
        for smaller in reductions(q):
            steps += 1
            sql = smaller.sql()
            m = run(mcur, sql)
            if isinstance(m, str):
                continue
            if differ(smaller, m, run(kcur, sql)) is not None:
                q = smaller
                progress = True
                break
            if steps >= REDUCE_STEPS_MAX:
                break
    return q


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("kura_port", type=int)
    parser.add_argument("mariadb_port", type=int)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--queries", type=int, default=DEFAULT_QUERIES)
    args = parser.parse_args()
    replay = (
        f"KURA_SQL_SEED={args.seed} cargo test -p kura-server --test sql_differential, "
        f"or differential.py KURA_PORT MARIADB_PORT --seed {args.seed} --queries {args.queries}"
    )
    print(f"sql differential: seed {args.seed}, {args.queries} queries", flush=True)
    started = time.monotonic()

    # A query that hangs fails after the read timeout instead of hanging the test.
    kura = pymysql.connect(
        host="127.0.0.1",
        port=args.kura_port,
        user="root",
        database="kura",
        connect_timeout=30,
        read_timeout=120,
    )
    mariadb = pymysql.connect(
        host="127.0.0.1",
        port=args.mariadb_port,
        user="root",
        init_command="SET NAMES utf8mb4 COLLATE utf8mb4_bin",
        connect_timeout=30,
        read_timeout=120,
    )
    kcur, mcur = kura.cursor(), mariadb.cursor()
    mcur.execute("DROP DATABASE IF EXISTS kura")
    mcur.execute("CREATE DATABASE kura DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin")
    mcur.execute("USE kura")

    rng = random.Random(args.seed)
    tables = make_tables()
    make_rows(rng, tables)
    load(mcur, tables)
    load(kcur, tables)
    loaded = time.monotonic()

    failures = {}  # class -> [(query, why, mariadb, kura)]
    queries = []
    # The loaded rows first, whole and in primary-key order.
    for table in tables:
        q = Query("load " + table.name, table.name, [table.pk.name])
        q.select = [(c.name, EXACT) for c in table.columns]
        q.order = [(table.pk.name, "", True)]
        q.total = True
        queries.append(q)
    generator = Generator(random.Random(args.seed), tables)
    queries += [generator.query() for _ in range(args.queries)]
    classes = {}
    for q in queries:
        sql = q.sql()
        m, k = run(mcur, sql), run(kcur, sql)
        if not kura.open or (isinstance(k, str) and k.startswith(LOST)):
            print(f"\nKura's connection broke on this query (seed {args.seed}); did kura crash?")
            print(f"  query:   {sql}")
            print(f"  mariadb: {show(m)}")
            print(f"  kura:    {k}")
            print(f"replay: {replay}")
            sys.exit(1)
        cls = q.cls.split(" ")[0]
        classes[cls] = classes.get(cls, 0) + 1
        why = differ(q, m, k)
        if why is not None:
            failures.setdefault(q.cls, []).append((q, why, m, k))
    ran = time.monotonic()

    differing = sum(len(f) for f in failures.values())
    for cls, found in sorted(failures.items()):
        print(f"\n=== {cls}: {len(found)} of the queries differ (seed {args.seed})")
        for q, why, m, k in found[:SHOWN_PER_CLASS]:
            print(f"  query:   {q.sql()}")
            print(f"  differs: {why}")
            print(f"  mariadb: {show(m)}")
            print(f"  kura:    {show(k)}")
            if why.startswith("MariaDB refused"):
                continue
            small = reduce(q, mcur, kcur)
            if small.sql() != q.sql():
                sql = small.sql()
                sm, sk = run(mcur, sql), run(kcur, sql)
                print(f"  reduced: {sql}")
                print(f"  differs: {differ(small, sm, sk)}")
                print(f"  mariadb: {show(sm)}")
                print(f"  kura:    {show(sk)}")
            print()
    print(
        f"sql differential: {len(queries)} queries "
        f"({', '.join(f'{n} {c}' for c, n in sorted(classes.items()))}), "
        f"{differing} differ; load {loaded - started:.1f} s, queries {ran - loaded:.1f} s"
    )
    if differing:
        print(f"replay: {replay}")
        sys.exit(1)


if __name__ == "__main__":
    main()
