// The collapsing navigation of narrow screens: without this script the links simply stay
// visible; with it, a "Menu" button shows and hides them.
(function () {
  var button = document.querySelector(".nav-toggle");
  var nav = document.getElementById("site-nav");
  if (!button || !nav) return;
  document.documentElement.classList.add("js-nav");
  button.hidden = false;
  button.addEventListener("click", function () {
    var open = button.getAttribute("aria-expanded") !== "true";
    button.setAttribute("aria-expanded", String(open));
    nav.classList.toggle("open", open);
  });
})();
