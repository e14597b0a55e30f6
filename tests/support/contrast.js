// Every visible text element whose contrast with its effective background is below WCAG AA
// (4.5:1, or 3:1 for large text). Returns [selector-ish, ratio, color, background] rows.
// rgb()/rgba() in 0-255, or color(srgb r g b / a) in 0-1 (what color-mix() computes to)
function parse(c) {
  var m = (c.match(/[\d.]+/g) || []).map(Number);
  if (/^color\(srgb/.test(c)) return m.map(function (v, i) { return i < 3 ? v * 255 : v; });
  return m;
}
function lum(rgb) {
  var a = rgb.slice(0, 3).map(function (v) { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
  return 0.2126 * a[0] + 0.7152 * a[1] + 0.0722 * a[2];
}
function background(el) {
  for (var e = el; e; e = e.parentElement) {
    var c = parse(getComputedStyle(e).backgroundColor);
    if (c.length === 3 || (c.length === 4 && c[3] > 0.5)) return c;
    if (getComputedStyle(e).backgroundImage !== "none") return null;  // a gradient: skip
  }
  return [255, 255, 255];
}
var bad = [];
document.querySelectorAll("body *").forEach(function (el) {
  var own = Array.prototype.some.call(el.childNodes, function (n) { return n.nodeType === 3 && n.textContent.trim(); });
  if (!own || !el.offsetParent && getComputedStyle(el).position !== "fixed") return;
  var r = el.getBoundingClientRect(); if (!r.width || !r.height) return;
  var style = getComputedStyle(el);
  var bg = background(el); if (!bg) return;
  var fg = parse(style.color);
  var l1 = lum(fg), l2 = lum(bg);
  var ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
  var size = parseFloat(style.fontSize), bold = parseInt(style.fontWeight, 10) >= 700;
  var need = (size >= 24 || (size >= 18.66 && bold)) ? 3 : 4.5;
  if (ratio < need) bad.push([el.tagName + "." + el.className, Math.round(ratio * 100) / 100, style.color, "rgb(" + bg.join(",") + ")", el.textContent.trim().slice(0, 30)]);
});
return bad;
