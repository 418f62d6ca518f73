"""SQLAlchemy and Alembic against Kura, as an application's ORM and its migrations
use them.

Usage: orm.py KURA_SQL_PORT

- `MetaData.reflect()` and the inspector read a table made by SQL: its columns'
  types, nullability and AUTO_INCREMENT, its primary key, its unique and plain
  indexes.
- An ORM session inserts rows (AUTO_INCREMENT ids), reads one `with_for_update()` in
  a transaction and changes it (a `Numeric` column too, read back as a `Decimal`).
- Alembic's operations, as a migration runs them: `op.add_column` and
  `op.create_index`, then `op.alter_column` (wider, renamed), `op.drop_index` and
  `op.drop_column`, read back by reflection.

Exits non-zero with the failing check.
"""
import sys
from decimal import Decimal

import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from peer import check


class Base(DeclarativeBase):
    pass


class Player(Base):
    __tablename__ = "players"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(32))
    email: Mapped[str | None] = mapped_column(sa.String(64))
    level: Mapped[int] = mapped_column(default=1)
    balance: Mapped[Decimal] = mapped_column(sa.Numeric(10, 2), default=Decimal("0.00"))


def main(port):
    engine = sa.create_engine(f"mysql+pymysql://root@127.0.0.1:{port}/kura")
    with engine.begin() as c:
        c.exec_driver_sql(
            "CREATE TABLE players (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,"
            " name VARCHAR(32) NOT NULL, email VARCHAR(64), level INT NOT NULL DEFAULT 1,"
            " balance DECIMAL(10,2) NOT NULL DEFAULT 0.00,"
            " UNIQUE KEY email (email), KEY level (level))"
        )
    md = sa.MetaData()
    md.reflect(engine)
    t = md.tables["players"]
    check(
        "reflected columns",
        [(c.name, str(c.type), c.nullable, c.primary_key) for c in t.columns],
        [
            ("id", "BIGINT", False, True),
            ("name", "VARCHAR(32)", False, False),
            ("email", "VARCHAR(64)", True, False),
            ("level", "INTEGER", False, False),
            ("balance", "DECIMAL(10, 2)", False, False),
        ],
    )
    check("id is AUTO_INCREMENT", t.c.id.autoincrement, True)
    check(
        "reflected indexes",
        sorted((i.name, bool(i.unique), [c.name for c in i.columns]) for i in t.indexes),
        [("email", True, ["email"]), ("level", False, ["level"])],
    )
    insp = sa.inspect(engine)
    check("primary key", insp.get_pk_constraint("players")["constrained_columns"], ["id"])
    check("players is a table", "players" in insp.get_table_names(), True)

    with Session(engine) as s:
        s.add_all([Player(name="ann", email="a@x.com"), Player(name="bob")])
        s.commit()
        p = s.execute(
            sa.select(Player).where(Player.name == "ann").with_for_update()
        ).scalar_one()
        p.level += 5
        p.balance += Decimal("12.345")
        s.commit()
        rows = [
            (p.id, p.name, p.email, p.level, str(p.balance))
            for p in s.scalars(sa.select(Player).order_by(Player.id))
        ]
        check("ORM rows", rows, [(1, "ann", "a@x.com", 6, "12.35"), (2, "bob", None, 1, "0.00")])

    with engine.begin() as c:
        op = Operations(MigrationContext.configure(c))
        op.add_column("players", sa.Column("score", sa.BigInteger(), nullable=True))
        op.create_index("ix_players_score", "players", ["score"])
    md = sa.MetaData()
    md.reflect(engine)
    t = md.tables["players"]
    check("columns after the migration", [c.name for c in t.columns],
          ["id", "name", "email", "level", "balance", "score"])
    check(
        "indexes after the migration",
        sorted(i.name for i in t.indexes),
        ["email", "ix_players_score", "level"],
    )
    # A later migration widens, renames and drops columns; rows stay.
    with engine.begin() as c:
        op = Operations(MigrationContext.configure(c))
        op.alter_column("players", "name", existing_type=sa.String(32), type_=sa.String(64),
                        existing_nullable=False)
        op.alter_column("players", "level", new_column_name="lvl", existing_type=sa.Integer(),
                        existing_nullable=False)
        op.drop_index("ix_players_score", table_name="players")
        op.drop_column("players", "score")
    md = sa.MetaData()
    md.reflect(engine)
    t = md.tables["players"]
    check("columns after the second migration", [c.name for c in t.columns],
          ["id", "name", "email", "lvl", "balance"])
    check("name widened", t.columns["name"].type.length, 64)
    with engine.connect() as c:
        rows = c.execute(sa.text("SELECT id, name, lvl FROM players ORDER BY id")).all()
    check("rows after the second migration", [tuple(r) for r in rows], [(1, "ann", 6), (2, "bob", 1)])
    print("SQLAlchemy reflects, its ORM writes and locks, Alembic migrates")


main(int(sys.argv[1]))
