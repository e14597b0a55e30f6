// Observable Plot, bundled with the parts of d3 it uses into one script that exposes it as
// window.ChukwaPlot (static/vendor/plot-<version>.min.js; see README.md). The experiment page's
// charts (static/chukwa/experiment_plots.js) are drawn with it as SVG whose axes and labels are
// `currentColor`, so they follow the page's light or dark colours.
export * from "@observablehq/plot";
