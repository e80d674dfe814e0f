const assert = require("assert");
const { toCamel } = require("./names");

assert.strictEqual(toCamel("user"), "user");
assert.strictEqual(toCamel("user_id"), "userId");
assert.strictEqual(toCamel("user_id_value"), "userIdValue");
console.log("ok");
