"use strict";

// The sum of the sizes of `paths`, each read with the async `stat(path)` -> {size}.
async function totalSize(paths, stat) {
  let total = 0;
  paths.forEach(async (path) => {
    total += (await stat(path)).size;
  });
  return total;
}

module.exports = { totalSize };
