// A preload (`node --import THIS bin/rvbox.js ...`) for tests of what a daemon
// does with a signal that comes while it is still starting: the first
// directory it makes under $RVBOX_TEST_SLOW_PATH prints "slow-start: waiting"
// on stderr and then takes 1.5 s (a busy wait for mkdirSync, a timer for
// fs.promises.mkdir), so the test can send its signal inside start.
import fs from "node:fs";
import { syncBuiltinESMExports } from "node:module";

const under = process.env.RVBOX_TEST_SLOW_PATH;
let done = false;
const hit = (p) => {
  if (done || !under || !String(p).startsWith(under)) return false;
  done = true;
  process.stderr.write("slow-start: waiting\n");
  return true;
};
const mkdirSync = fs.mkdirSync;
fs.mkdirSync = function (p, ...rest) {
  if (hit(p)) {
    const end = Date.now() + 1500;
    while (Date.now() < end);
  }
  return mkdirSync.call(this, p, ...rest);
};
const mkdir = fs.promises.mkdir;
fs.promises.mkdir = async function (p, ...rest) {
  if (hit(p)) await new Promise((r) => setTimeout(r, 1500));
  return mkdir.call(this, p, ...rest);
};
syncBuiltinESMExports();
