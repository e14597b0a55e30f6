// Rebuilds the vendored bundles under static/vendor/ from the pinned packages of package.json:
//   cd frontend && npm ci && npm run build
import { copyFileSync, readFileSync } from "node:fs";
import { build } from "esbuild";

const version = (name) =>
  JSON.parse(readFileSync(`node_modules/${name}/package.json`, "utf8")).version;
const vendor = "../static/vendor";

const view = version("@codemirror/view");
await build({
  entryPoints: ["codemirror-entry.mjs"],
  bundle: true,
  minify: true,
  format: "iife",
  target: ["es2020"],
  legalComments: "eof",
  outfile: `${vendor}/codemirror-${view}.min.js`,
});
copyFileSync("node_modules/@codemirror/view/LICENSE", `${vendor}/codemirror-LICENSE.txt`);

const plot = version("@observablehq/plot");
await build({
  entryPoints: ["plot-entry.mjs"],
  bundle: true,
  minify: true,
  format: "iife",
  globalName: "ChukwaPlot",
  target: ["es2020"],
  legalComments: "eof",
  outfile: `${vendor}/plot-${plot}.min.js`,
});
copyFileSync("node_modules/@observablehq/plot/LICENSE", `${vendor}/plot-LICENSE.txt`);

const morph = version("idiomorph");
copyFileSync(
  "node_modules/idiomorph/dist/idiomorph-ext.min.js",
  `${vendor}/idiomorph-ext-${morph}.min.js`
);
copyFileSync("node_modules/idiomorph/LICENSE", `${vendor}/idiomorph-LICENSE.txt`);
console.log(`built codemirror-${view}.min.js, plot-${plot}.min.js and idiomorph-ext-${morph}.min.js`);
