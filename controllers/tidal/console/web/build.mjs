// Bundles the console into <outdir> (argument 1, default ./dist): index.html, assets/app.js,
// assets/app.css. Deterministic: same sources and lockfile, same bytes.
import { build } from "esbuild";
import { copyFileSync, mkdirSync } from "node:fs";
import { join } from "node:path";

const out = process.argv[2] || "dist";
mkdirSync(join(out, "assets"), { recursive: true });
await build({
  entryPoints: ["src/main.js"],
  bundle: true,
  minify: true,
  format: "esm",
  target: ["chrome110", "firefox110", "safari16"],
  outfile: join(out, "assets", "app.js"),
  legalComments: "linked",
  logLevel: "warning",
});
copyFileSync("src/index.html", join(out, "index.html"));
copyFileSync("src/app.css", join(out, "assets", "app.css"));
