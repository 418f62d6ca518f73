"""pymemcache over TLS with a verified certificate (memcached's -Z).

Usage: tls_client.py PORT CERTDIR MODE. CERTDIR holds the test certificates
(kura_testkit::tls): ca.pem signed the server's certificate for 127.0.0.1,
other-ca.pem signed nothing the server shows, client.pem/client.key are a client
certificate ca.pem signed. MODE is `plain` (the server asks for no client
certificate) or `client-cert` (it requires one, ssl_verify_mode=2). Exits non-zero,
naming the failed check. The suite runs it against Debian's memcached and kura with
the same certificates, so every expectation is memcached's own.
"""
import os
import ssl
import sys

import pymemcache.client.base

port, certs, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]


def check(got, want, what):
    if got != want:
        raise SystemExit(f"{what}: got {got!r}, want {want!r}")


def context(ca, client_cert=False, version=None):
    ctx = ssl.create_default_context(cafile=os.path.join(certs, ca))
    if client_cert:
        ctx.load_cert_chain(os.path.join(certs, "client.pem"), os.path.join(certs, "client.key"))
    if version is not None:
        ctx.minimum_version = version
        ctx.maximum_version = version
    return ctx


def client(ctx):
    # check_hostname is on: the certificate must name 127.0.0.1.
    return pymemcache.client.base.Client(("127.0.0.1", port), tls_context=ctx, timeout=5)


def refused(ctx, what):
    mc = client(ctx)
    try:
        mc.set("refused", b"x", noreply=False)
        mc.get("refused")
    except (ssl.SSLError, ConnectionError, OSError):
        return
    finally:
        mc.close()
    raise SystemExit(f"{what}: not refused")


with_cert = mode == "client-cert"
for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
    mc = client(context("ca.pem", with_cert, version))
    name = version.name
    check(mc.set("k", b"value", expire=0, flags=5, noreply=False), True, f"{name} set")
    check(mc.get("k"), b"value", f"{name} get")
    value, cas = mc.gets("k")
    check(value, b"value", f"{name} gets")
    check(mc.cas("k", b"other", cas, noreply=False), True, f"{name} cas")
    check(mc.set("n", b"10", noreply=False), True, f"{name} set n")
    check(mc.incr("n", 5), 15, f"{name} incr")
    big = os.urandom(300 * 1024)
    check(mc.set("big", big, noreply=False), True, f"{name} set 300 KiB")
    check(mc.get("big"), big, f"{name} get 300 KiB")
    many = {f"m{i}": str(i).encode() for i in range(50)}
    check(mc.set_many(many, noreply=False), [], f"{name} set_many")
    check(mc.get_many(list(many)), many, f"{name} get_many")
    check(mc.delete("k", noreply=False), True, f"{name} delete")
    check(mc.get("k"), None, f"{name} get after delete")
    mc.close()

refused(context("other-ca.pem", with_cert), "a server certificate another CA signed")
if with_cert:
    refused(context("ca.pem", False), "a client without a certificate")
print(f"tls ({mode}): all checks passed")
