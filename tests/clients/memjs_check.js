// memjs, Node's binary-protocol memcached client, logging in with SASL PLAIN.
//
// Usage: node memjs_check.js PORT USER PASSWORD. Logs in, sets, gets, increments,
// deletes, and with a wrong password is refused. Exits non-zero, naming the failed
// check. The suite runs it against Debian's memcached (-S) and against kura (-Y), so
// every expectation is memcached's own. memjs comes from npm into target/node
// (scripts/install-test-deps.sh).
"use strict";
const memjs = require("memjs");

const [port, user, password] = process.argv.slice(2);

function check(got, want, what) {
  if (JSON.stringify(got) !== JSON.stringify(want)) {
    console.error(`${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
    process.exit(1);
  }
}

async function main() {
  const options = { retries: 0, timeout: 5, conntimeout: 5, logger: { log() {} } };
  const mc = memjs.Client.create(`${user}:${password}@127.0.0.1:${port}`, options);
  check(await mc.set("memjs", "hello", { expires: 0 }), true, "set");
  const got = await mc.get("memjs");
  check(got.value.toString(), "hello", "get");
  check((await mc.get("memjs-missing")).value, null, "get miss");
  check(await mc.add("memjs", "again"), false, "add existing");
  await mc.set("n", "41");
  check((await mc.increment("n", 1)).value, 42, "increment");
  check(await mc.delete("memjs"), true, "delete");
  check((await mc.get("memjs")).value, null, "get after delete");
  mc.close();

  const bad = memjs.Client.create(`${user}:${password}x@127.0.0.1:${port}`, options);
  let refused = false;
  try {
    await bad.get("n");
  } catch (e) {
    refused = true;
  }
  check(refused, true, "a wrong password is refused");
  bad.close();
  console.log("memjs: all checks passed");
}

main().catch((e) => {
  console.error(`memjs: ${e && e.stack ? e.stack : e}`);
  process.exit(1);
});
