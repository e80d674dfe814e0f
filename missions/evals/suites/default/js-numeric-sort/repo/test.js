"use strict";
const assert = require("node:assert/strict");
const { median } = require("./stats");

assert.equal(median([3, 1, 2]), 2);
assert.equal(median([10, 9, 1]), 9);
assert.equal(median([100, 25, 3, 4]), 14.5);
assert.equal(median([-5, -10, 2]), -5);
console.log("stats: all tests passed");
