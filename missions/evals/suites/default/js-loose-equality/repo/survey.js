"use strict";

// The number of answers left blank: the empty string. 0 and false are answers.
function countBlank(answers) {
  return answers.filter((answer) => answer == "").length;
}

module.exports = { countBlank };
