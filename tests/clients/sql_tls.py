"""PyMySQL over TLS to Kura's SQL port when the server has TLS (-Z).

PyMySQL asks for TLS whenever the server offers it (its PREFERRED mode); the
verified connection here names the CA, and the refused one disables TLS.

Usage: sql_tls.py PORT CA. With the CA that signed the server's certificate the
connection is encrypted and verified, and SQL runs; without TLS the server refuses
with MySQL's 3159 (require_secure_transport). Exits non-zero, naming the failed check.
"""
import sys

import pymysql

port, ca = int(sys.argv[1]), sys.argv[2]


def check(got, want, what):
    if got != want:
        raise SystemExit(f"{what}: got {got!r}, want {want!r}")


conn = pymysql.connect(
    host="127.0.0.1", port=port, user="root", password="",
    ssl={"ca": ca, "check_hostname": True}, autocommit=True,
)
check(conn._sock.version() in ("TLSv1.2", "TLSv1.3"), True, "an encrypted socket")
with conn.cursor() as cur:
    cur.execute("CREATE TABLE tls_t (id INT PRIMARY KEY, v VARCHAR(20))")
    cur.execute("INSERT INTO tls_t VALUES (1, 'one'), (2, 'two')")
    cur.execute("SELECT v FROM tls_t WHERE id = 2")
    check(cur.fetchall(), (("two",),), "a row over TLS")
conn.close()

try:
    pymysql.connect(host="127.0.0.1", port=port, user="root", password="", ssl_disabled=True)
except pymysql.err.OperationalError as e:
    check(e.args[0], 3159, "the refusal's code without TLS")
else:
    raise SystemExit("a connection without TLS was let in")
print("sql tls: all checks passed")
