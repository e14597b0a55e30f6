/* The experiment page's charts, drawn with Observable Plot (static/vendor/plot-<version>.min.js,
 * window.ChukwaPlot) from the results the page hands over in a json_script
 * (#experiment-plot-data: the arms, the control, and experiment_results' metrics).
 *
 * Per metric: (a) the mean of each turn with its 95% CI band, one line per arm; (b) each world's
 * value by arm, with the arm's mean and 95% CI. The numbers are also in the page's tables; the
 * charts only draw them. Axes and labels are `currentColor` (the page's text colour); the arm
 * colours come in a light and a dark set, and the charts are drawn again when the colour scheme
 * or the width changes.
 */
(function () {
  "use strict";

  var P = window.ChukwaPlot;
  var source = document.getElementById("experiment-plot-data");
  if (!P || !source) return;
  var data = JSON.parse(source.textContent);
  var dark = window.matchMedia("(prefers-color-scheme: dark)");
  var LIGHT = ["#2f5bd3", "#c4470d", "#2b8a3e", "#9c36b5", "#c2255c", "#0b7285", "#8f5b00", "#5c940d"];
  var DARK = ["#8fb0ff", "#ff9b66", "#69db7c", "#e599f7", "#f783ac", "#66d9e8", "#ffc078", "#a9e34b"];

  function fmt(value) {
    if (value === null || value === undefined) return "—";
    return Number.isInteger(value) ? String(value) : value.toPrecision(4).replace(/\.?0+$/, "");
  }

  // an axis's numbers by the metric's type: a proportion (0–1) as a percentage, anything else
  // with no trailing zeros (a count's integers as integers), never "0.000000"
  function axisFormat(metric) {
    var m = metric.metric || {};
    if (m.range_low === 0 && m.range_high === 1) return ".0%";
    return "~g";
  }

  function colour() {
    return { domain: data.arms, range: dark.matches ? DARK : LIGHT };
  }

  function style() {
    return { background: "transparent", color: "currentColor", fontSize: "12px", overflow: "visible" };
  }

  function turnsChart(metric, width) {
    var rows = [];
    metric.arms.forEach(function (arm) {
      arm.per_turn.forEach(function (p) {
        rows.push({ arm: arm.arm, turn: p.turn, n: p.n, mean: p.mean, low: p.ci_low, high: p.ci_high });
      });
    });
    var turns = rows.map(function (r) { return r.turn; });
    var last = Math.max.apply(null, turns.concat([1]));
    return P.plot({
      width: width,
      height: 240,
      marginLeft: 48,
      marginRight: 16,
      style: style(),
      x: { label: "turn", domain: [0, last], ticks: Math.min(last, width < 480 ? 6 : 12), tickFormat: "d" },
      // a bounded metric's axis starts at its lower bound (a count's at 0: its band never dips)
      y: {
        label: "mean",
        grid: true,
        nice: true,
        zero: metric.metric.range_low === 0,
        tickFormat: axisFormat(metric),
      },
      color: Object.assign({ legend: true }, colour()),
      marks: [
        P.areaY(rows, { x: "turn", y1: "low", y2: "high", fill: "arm", fillOpacity: 0.18, curve: "linear" }),
        P.lineY(rows, { x: "turn", y: "mean", stroke: "arm", strokeWidth: 2 }),
        P.dot(rows, {
          x: "turn",
          y: "mean",
          fill: "arm",
          r: 3,
          title: function (d) {
            var ci = d.low === null ? "" : " [" + fmt(d.low) + ", " + fmt(d.high) + "]";
            return d.arm + ", turn " + d.turn + ": " + fmt(d.mean) + ci + " (n=" + d.n + ")";
          },
        }),
      ],
    });
  }

  // a world's vertical offset within its arm's row: spread by replicate, the same on every draw
  function jitter(replicate) {
    return (((replicate * 0.6180339887) % 1) - 0.5) * 0.4;
  }

  function worldsChart(metric, width) {
    var arms = metric.arms.map(function (a) { return a.arm; });
    var index = {};
    arms.forEach(function (arm, i) { index[arm] = i; });
    var dots = [];
    var summaries = [];
    metric.arms.forEach(function (arm) {
      arm.worlds.forEach(function (w) {
        if (w.value === null) return;
        dots.push({ arm: arm.arm, world: w.world, value: w.value, y: index[arm.arm] + jitter(w.replicate) });
      });
      if (arm.mean !== null) {
        summaries.push({ arm: arm.arm, mean: arm.mean, low: arm.ci_low, high: arm.ci_high, y: index[arm.arm] + 0.36 });
      }
    });
    var longest = Math.max.apply(null, arms.map(function (a) { return a.length; }));
    // the values and intervals drawn, and around one value a range rather than a point
    var xs = dots.map(function (d) { return d.value; });
    summaries.forEach(function (m) {
      xs.push(m.mean);
      if (m.low !== null) xs.push(m.low, m.high);
    });
    var low = xs.length ? Math.min.apply(null, xs) : 0;
    var high = xs.length ? Math.max.apply(null, xs) : 1;
    if (low === high) {
      low -= 0.5;
      high += 0.5;
    }
    return P.plot({
      width: width,
      height: 36 + 58 * arms.length,
      marginLeft: Math.min(140, 16 + 7.5 * longest),
      marginRight: 16,
      style: style(),
      x: {
        label: "value",
        grid: true,
        nice: true,
        domain: [low, high],
        ticks: width < 480 ? 4 : 8,
        tickFormat: axisFormat(metric),
      },
      y: {
        label: null,
        domain: [arms.length - 0.5, -0.5],
        ticks: arms.map(function (_, i) { return i; }),
        tickFormat: function (i) { return arms[i]; },
        tickSize: 0,
      },
      color: colour(),
      marks: [
        P.dot(dots, {
          x: "value",
          y: "y",
          fill: "arm",
          fillOpacity: 0.55,
          stroke: "arm",
          r: 4,
          title: function (d) { return d.world + ": " + fmt(d.value); },
        }),
        P.link(summaries.filter(function (s) { return s.low !== null; }), {
          x1: "low", x2: "high", y1: "y", y2: "y", stroke: "arm", strokeWidth: 2.5,
        }),
        P.dot(summaries, {
          x: "mean", y: "y", symbol: "diamond2", stroke: "arm", fill: "arm", r: 5,
          title: function (s) {
            var ci = s.low === null ? "" : " [" + fmt(s.low) + ", " + fmt(s.high) + "]";
            return s.arm + " mean: " + fmt(s.mean) + ci;
          },
        }),
      ],
    });
  }

  function draw() {
    document.querySelectorAll(".plot-area[data-plot]").forEach(function (el) {
      var metric = data.metrics[Number(el.getAttribute("data-index"))];
      if (!metric) return;
      var width = Math.max(260, Math.floor(el.clientWidth));
      var chart = el.getAttribute("data-plot") === "turns" ? turnsChart(metric, width) : worldsChart(metric, width);
      el.replaceChildren(chart);
      el.setAttribute("data-drawn", "true");
    });
  }

  var lastWidth = 0;
  var pending = null;
  window.addEventListener("resize", function () {
    if (pending) clearTimeout(pending);
    pending = setTimeout(function () {
      var width = document.documentElement.clientWidth;
      if (width !== lastWidth) {
        lastWidth = width;
        draw();
      }
    }, 150);
  });
  dark.addEventListener("change", draw);
  lastWidth = document.documentElement.clientWidth;
  draw();
})();
