/* Live trace pages (attempt timeline, LLM call, invocation).
 *
 * The pages poll themselves with HTMX and the answer is morphed into the page (idiomorph), so
 * what the reviewer did stays as it was: a section they opened or closed keeps its state, the
 * selected row stays selected. State that belongs to the reviewer lives in attributes the server
 * never renders (data-client-*), which the morph is told to leave alone.
 */
(function () {
  "use strict";

  var live = (window.chukwaLive = window.chukwaLive || { polls: 0, loadedAt: Date.now() });

  function keepClientState(attr, el) {
    if (attr.indexOf("data-client-") === 0) return false;
    // A <details> the reviewer toggled keeps the state they chose; others follow the server.
    if (attr === "open" && el.tagName === "DETAILS" && el.hasAttribute("data-client-toggled")) {
      return false;
    }
    return true;
  }
  if (window.Idiomorph) {
    window.Idiomorph.defaults.callbacks.beforeAttributeUpdated = keepClientState;
  }

  document.addEventListener("htmx:afterSettle", function () {
    live.polls += 1;
    follow();
  });

  // --- the waterfall: selection and keyboard ---------------------------------------------------

  function rowEl(id) {
    return document.querySelector('.wf-row[data-row="' + CSS.escape(id) + '"]');
  }

  function select(id, push) {
    var panel = document.getElementById("wf-panel");
    if (!panel) return;
    document.querySelectorAll(".wf-row[data-client-selected]").forEach(function (el) {
      el.removeAttribute("data-client-selected");
    });
    panel.querySelectorAll(".wf-detail[data-client-shown]").forEach(function (el) {
      el.removeAttribute("data-client-shown");
    });
    if (!id) {
      panel.removeAttribute("data-client-open");
      if (push) history.replaceState(null, "", location.pathname + location.search);
      return;
    }
    var row = rowEl(id);
    var detail = document.getElementById("detail-" + id);
    if (row) row.setAttribute("data-client-selected", "");
    if (detail) detail.setAttribute("data-client-shown", "");
    panel.setAttribute("data-client-open", "");
    if (push) history.replaceState(null, "", "#row=" + encodeURIComponent(id));
  }

  function visibleRows() {
    // The rows a reader sees: a row inside a folded <details> keeps a layout box (its content
    // is only content-visibility: hidden), so offsetParent alone would count it.
    return Array.prototype.filter.call(document.querySelectorAll(".wf-tree .wf-row"), function (el) {
      if (el.checkVisibility) return el.checkVisibility();
      return el.offsetParent !== null && !el.closest("details:not([open]) > :not(summary)");
    });
  }

  document.addEventListener("click", function (event) {
    if (event.target.closest(".wf-panel-close")) {
      select(null, true);
      return;
    }
    var summary = event.target.closest("summary");
    if (summary && !summary.closest(".wf-tree") && summary.parentElement.tagName === "DETAILS") {
      // any other section the reviewer opens or closes keeps that state across polls
      summary.parentElement.setAttribute("data-client-toggled", "");
      return;
    }
    var row = event.target.closest(".wf-tree .wf-row[data-row]");
    if (!row || event.target.closest("a")) return;
    if (row.tagName === "SUMMARY") {
      var details = row.parentElement;
      // The caret (or the keyboard: a click with detail 0) folds; elsewhere a click selects.
      if (event.target.closest(".caret") || event.detail === 0) {
        details.setAttribute("data-client-toggled", "");
        if (event.detail !== 0) return; // the caret folds and unfolds, it does not select
      } else {
        event.preventDefault();
      }
    }
    select(row.getAttribute("data-row"), true);
  });

  document.addEventListener("keydown", function (event) {
    var row = event.target.closest && event.target.closest(".wf-tree .wf-row");
    if (!row) return;
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      var rows = visibleRows();
      var next = rows[rows.indexOf(row) + (event.key === "ArrowDown" ? 1 : -1)];
      if (next) {
        next.focus();
        select(next.getAttribute("data-row"), true);
      }
      event.preventDefault();
    } else if ((event.key === "Enter" || event.key === " ") && row.tagName !== "SUMMARY") {
      select(row.getAttribute("data-row"), true);
      event.preventDefault();
    } else if (event.key === "Escape") {
      select(null, true);
    }
  });

  // --- streaming text: stay at the bottom while it grows ----------------------------------------

  function follow() {
    document.querySelectorAll("[data-follow]").forEach(function (el) {
      if (el.getAttribute("data-client-unpinned") === null) el.scrollTop = el.scrollHeight;
    });
  }
  document.addEventListener(
    "scroll",
    function (event) {
      var el = event.target;
      if (!el || !el.hasAttribute || !el.hasAttribute("data-follow")) return;
      if (el.scrollTop + el.clientHeight >= el.scrollHeight - 8) {
        el.removeAttribute("data-client-unpinned");
      } else {
        el.setAttribute("data-client-unpinned", "");
      }
    },
    true
  );

  function restore() {
    var match = /^#row=(.+)$/.exec(location.hash);
    if (match) {
      var id = decodeURIComponent(match[1]);
      var row = rowEl(id);
      if (row) {
        var parent = row.parentElement && row.parentElement.closest("details");
        while (parent) {
          parent.open = true;
          parent.setAttribute("data-client-toggled", "");
          parent = parent.parentElement && parent.parentElement.closest("details");
        }
        select(id, false);
        row.scrollIntoView({ block: "center" });
      }
    }
    follow();
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", restore);
  } else {
    restore();
  }
})();
