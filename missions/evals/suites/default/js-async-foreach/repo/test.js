"use strict";
const assert = require("node:assert/strict");
const { totalSize } = require("./sizes");

const sizes = { "a.txt": 10, "b.txt": 32, "c.txt": 0 };
const stat = (path) =>
  new Promise((resolve) => setTimeout(() => resolve({ size: sizes[path] }), 5));

(async () => {
  assert.equal(await totalSize(["a.txt", "b.txt", "c.txt"], stat), 42);
  assert.equal(await totalSize([], stat), 0);
  console.log("sizes: all tests passed");
})().catch((error) => {
  console.error(error);
  process.exitCode = 1;
});
