function toCamel(name) {
  return name.replace(/_([a-z])/, (_, letter) => letter.toUpperCase());
}

module.exports = { toCamel };
