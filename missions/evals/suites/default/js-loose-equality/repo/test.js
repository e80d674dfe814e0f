"use strict";
const assert = require("node:assert/strict");
const { countBlank } = require("./survey");

assert.equal(countBlank(["", "yes", ""]), 2);
assert.equal(countBlank([0, false, "", "no"]), 1);
assert.equal(countBlank([" ", "0"]), 0);
assert.equal(countBlank([]), 0);
console.log("survey: all tests passed");
