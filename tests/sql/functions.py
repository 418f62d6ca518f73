"""MySQL's functions (strings, numbers, dates and times), casts and result column
names, against MariaDB's.

Usage: functions.py KURA_SQL_PORT MARIADB_PORT

The same table (ids, names with spaces and case, ratios, NULLs) in both servers,
then SELECTs of the functions ported schemas and ORMs use, on constants and on
columns: each statement's column names (what dict cursors and ORMs key rows by),
rows and error code must be the same; every difference is printed.

Exits non-zero with the failing check.
"""
import sys

from peer import compare, connect, mariadb_database, run, verdict

SETUP = [
    "SET time_zone = '+00:00'",
    "DROP TABLE IF EXISTS fd",
    "CREATE TABLE fd (id INT PRIMARY KEY, at DATETIME, d DATE)",
    "INSERT INTO fd VALUES (1, '2024-01-31 13:04:09', '2024-02-29'), (2, '1999-12-31 23:59:59',"
    " '2000-01-01'), (3, NULL, NULL), (4, '2024-03-01 00:00:00', '2023-01-01')",
    "DROP TABLE IF EXISTS fx",
    "CREATE TABLE fx (id INT PRIMARY KEY, name VARCHAR(32), ratio DOUBLE, n BIGINT, t TEXT)",
    "INSERT INTO fx VALUES (1, '  Ann  ', 2.18, 7, 'hello world'),"
    " (2, 'bob', -1.5, -3, 'Hello'), (3, NULL, NULL, NULL, NULL), (4, 'Caf\u00e9', 0.5, 0, '')",
]

QUERIES = [
    "SELECT CHAR_LENGTH(name), LENGTH(name), CHARACTER_LENGTH(t) FROM fx ORDER BY id",
    "SELECT GREATEST(id, n), LEAST(id, n), GREATEST(1, 3, 0), LEAST('b', 'a', 'c'), GREATEST(ratio, 1e0) FROM fx ORDER BY id",
    "SELECT LEFT(t, 3), RIGHT(t, 2), REVERSE(t) FROM fx ORDER BY id",
    "SELECT LPAD(id, 4, '0'), RPAD(name, 8, '.'), LPAD('abc', 2, 'x') FROM fx ORDER BY id",
    "SELECT LOCATE('l', t), LOCATE('l', t, 4), POSITION('o' IN t), INSTR(t, 'lo') FROM fx ORDER BY id",
    "SELECT MOD(n, 4), n % 4, FLOOR(ratio), CEIL(ratio), CEILING(ratio) FROM fx ORDER BY id",
    "SELECT ROUND(ratio), ROUND(ratio, 1), TRUNCATE(ratio, 1), ABS(n), SIGN(n) FROM fx ORDER BY id",
    "SELECT t REGEXP '^h', t RLIKE 'o$', t NOT REGEXP 'l+' FROM fx ORDER BY id",
    "SELECT ISNULL(name), IFNULL(name, 'none'), COALESCE(name, t, 'x'), NULLIF(n, 0) FROM fx ORDER BY id",
    "SELECT SUBSTRING(t, 2, 3), SUBSTRING(t FROM 2 FOR 3), SUBSTRING(t, -3), SUBSTR(t, 2) FROM fx ORDER BY id",
    "SELECT TRIM(name), TRIM(LEADING 'h' FROM t), TRIM(TRAILING 'o' FROM t), LTRIM(name), RTRIM(name) FROM fx ORDER BY id",
    "SELECT CAST(ratio AS SIGNED), CAST(id AS UNSIGNED), CAST(id AS CHAR), CAST('12abc' AS SIGNED) FROM fx ORDER BY id",
    "SELECT HEX(1), HEX(255), HEX('abc'), HEX(n), UNHEX('616263') FROM fx ORDER BY id",
    "SELECT UPPER(name), LOWER(name), UCASE(t), LCASE(t) FROM fx ORDER BY id",
    "SELECT CONCAT(name, '-', id), CONCAT_WS(',', name, t, id), REPEAT('ab', 3), SPACE(2) FROM fx ORDER BY id",
    "SELECT REPLACE(t, 'l', 'L'), INSERT(t, 1, 2, 'XY'), FIELD('b', 'a', 'b'), ELT(2, 'a', 'b') FROM fx ORDER BY id",
    "SELECT IF(n > 0, 'pos', 'neg'), CASE WHEN n > 0 THEN 1 ELSE 0 END FROM fx ORDER BY id",
    "SELECT POW(2, 10), POWER(2, 0.5), SQRT(16), EXP(0), LN(1), LOG10(100), LOG2(8), LOG(2, 8), SQRT(-1) FROM fx WHERE id = 1",
    "SELECT 7 DIV 2, -7 DIV 2, 7.0e0 / 2, 1 / 0, 5 % 0 FROM fx WHERE id = 1",
    "SELECT CONV(255, 10, 16), BIN(5), OCT(8), ASCII('a'), CHAR(65), ORD('a') FROM fx WHERE id = 1",
    "SELECT STRCMP('a', 'b'), STRCMP('b', 'a'), STRCMP('a', 'a') FROM fx WHERE id = 1",
    "SELECT LENGTH(UUID()), UUID() = UUID(), LENGTH(NOW()), LENGTH(CURDATE()), LENGTH(CURRENT_TIMESTAMP()) FROM fx WHERE id = 1",
    "SELECT b'1000001' AS b, 0x41, X'41' FROM fx WHERE id = 1",
    "SELECT id, name AS who, name who2, fx.t, COUNT(*) FROM fx GROUP BY id, name, t ORDER BY id",
    "SELECT nosuchcol FROM fx",
    "SELECT CAST(DATE(at) AS CHAR), YEAR(at), MONTH(at), DAY(at), HOUR(at), MINUTE(at),"
    " SECOND(at), DAYOFMONTH(d) FROM fd ORDER BY id",
    "SELECT DAYOFWEEK(at), WEEKDAY(at), DAYOFYEAR(d), QUARTER(at), DAYNAME(at), MONTHNAME(d),"
    " CAST(LAST_DAY(at) AS CHAR), DATEDIFF(at, d), UNIX_TIMESTAMP(at) FROM fd ORDER BY id",
    "SELECT CAST(FROM_UNIXTIME(1700000000) AS CHAR), DATE_FORMAT(at, '%Y-%m-%d %H:%i:%s %W %M %e %p %j %y %b %a'),"
    " DATE_FORMAT(d, '%d/%m/%Y') FROM fd ORDER BY id",
    "SELECT CAST(at + INTERVAL 1 DAY AS CHAR), CAST(DATE_ADD(at, INTERVAL 1 MONTH) AS CHAR),"
    " CAST(DATE_SUB(d, INTERVAL 2 WEEK) AS CHAR), CAST(d - INTERVAL 1 DAY AS CHAR),"
    " CAST(d + INTERVAL 3 HOUR AS CHAR), CAST(at - INTERVAL 90 MINUTE AS CHAR) FROM fd ORDER BY id",
    "SELECT TIMESTAMPDIFF(DAY, d, at), TIMESTAMPDIFF(MONTH, '2024-01-31', '2024-02-29'),"
    " TIMESTAMPDIFF(HOUR, at, '2024-12-31 00:00:00'), TIMESTAMPDIFF(YEAR, d, at) FROM fd ORDER BY id",
    "SELECT count(*) FROM fd WHERE at > NOW() - INTERVAL 100 YEAR",
    "SELECT id FROM fd WHERE at < DATE_SUB('2024-03-01', INTERVAL 1 SECOND) ORDER BY id",
    "SELECT MAX(name), MIN(ratio), COUNT(DISTINCT n), GROUP_CONCAT(id ORDER BY id) FROM fx",
]


def main(kura_port, mariadb_port):
    kura = connect(kura_port, "kura")
    mariadb = mariadb_database(mariadb_port, "fx")
    for s in SETUP:
        kura.cursor().execute(s)
        mariadb.cursor().execute(s)
    outcome = lambda conn, q: run(conn, q, names=True)
    verdict(compare(kura, mariadb, QUERIES, outcome), len(QUERIES))


main(int(sys.argv[1]), int(sys.argv[2]))
