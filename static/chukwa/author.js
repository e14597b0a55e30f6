/* The workflow editor: CodeMirror 6 (static/vendor/codemirror-*.min.js, window.ChukwaCM) over the
 * form's <textarea name="content">, which stays the field the forms post (without JavaScript the
 * textarea itself is the editor).
 *
 * - The server validates as you type (the same dry run as the Validate button, ?format=json);
 *   its error is marked at the reported line: a JSON syntax error at its line and column, a
 *   validation error at the path it names (content.nodes[0].max_tool_calls), found in the
 *   editor's syntax tree.
 * - Hashes are completed inside "hash" strings from the stored components of the kind the
 *   reference needs; "Insert a reference" puts {"hash": …} at the cursor.
 * - Prompts: every LLM node's messages as multi-line text fields that rewrite the JSON.
 */
(function () {
  "use strict";

  var CM = window.ChukwaCM;
  var textarea = document.getElementById("workflow-content");
  var host = document.getElementById("author-editor");
  if (!CM || !textarea || !host) return;

  var components = JSON.parse(document.getElementById("author-components").textContent || "{}");
  var validateUrl = host.getAttribute("data-validate") + "?format=json";
  var csrf = (document.querySelector("#author-form [name=csrfmiddlewaretoken]") || {}).value || "";
  var status = document.getElementById("author-validation");

  // --- locating a reported path in the document --------------------------------------------

  function segments(field) {
    var out = [];
    var path = String(field || "").replace(/^content\.?/, "");
    var re = /([^.[\]]+)|\[(\d+)\]/g;
    var m;
    while ((m = re.exec(path))) out.push(m[2] !== undefined ? Number(m[2]) : m[1]);
    return out;
  }

  function valueChildren(node) {
    var kids = [];
    for (var c = node.firstChild; c; c = c.nextSibling) {
      if (!/^[[\]{},:]$/.test(c.name) && c.name !== "⚠") kids.push(c);
    }
    return kids;
  }

  function locate(state, field) {
    var tree = CM.syntaxTree(state);
    var node = tree.topNode.firstChild;
    if (!node) return null;
    var found = { from: node.from, to: Math.min(node.to, node.from + 1) };
    var parts = segments(field);
    for (var i = 0; i < parts.length && node; i++) {
      var part = parts[i];
      var next = null;
      if (typeof part === "number" && node.name === "Array") {
        next = valueChildren(node)[part] || null;
        if (next) found = { from: next.from, to: next.to };
      } else if (node.name === "Object") {
        valueChildren(node).forEach(function (prop) {
          if (next || prop.name !== "Property") return;
          var key = prop.getChild("PropertyName");
          if (!key) return;
          var text = state.sliceDoc(key.from, key.to);
          var name;
          try {
            name = JSON.parse(text);
          } catch (e) {
            name = text;
          }
          if (String(name) === String(part)) {
            var kids = valueChildren(prop);
            next = kids[kids.length - 1] || prop;
            found = { from: key.from, to: next.to };
          }
        });
      }
      if (!next) break; // the deepest part that exists is marked
      node = next;
    }
    // Mark one line at most: a whole object underlined says nothing.
    var line = state.doc.lineAt(found.from);
    return { from: found.from, to: Math.max(found.from + 1, Math.min(found.to, line.to)) };
  }

  // --- server validation as a lint source --------------------------------------------------

  function showStatus(data) {
    if (!status) return;
    status.textContent = "";
    var p = document.createElement(data.valid ? "p" : "div");
    if (data.valid) {
      p.className = "author-valid";
      p.textContent =
        "✓ valid — would be stored as " + data.hash.slice(0, 12) + "…" +
        (data.would_be_new ? "" : " (already stored)");
    } else {
      var e = data.error || {};
      p.className = "author-error";
      p.setAttribute("role", "alert");
      var where = e.field && String(e.message).indexOf(e.field) !== 0 ? " at " + e.field : "";
      if (e.line) where += " (line " + e.line + ", column " + e.column + ")";
      p.textContent = "invalid (" + e.code + ")" + where + ": " + e.message;
    }
    status.appendChild(p);
  }

  function serverLint(view) {
    var body = new FormData();
    var doc = view.state.doc.toString();
    body.append("content", doc);
    return fetch(validateUrl, {
      method: "POST",
      body: body,
      headers: { "X-CSRFToken": csrf },
      credentials: "same-origin",
    })
      .then(function (r) {
        return r.json();
      })
      .then(function (data) {
        if (view.state.doc.toString() !== doc) return []; // stale: a newer check follows
        showStatus(data);
        if (data.valid || !data.error) return [];
        var e = data.error;
        var range;
        if (e.line) {
          var line = view.state.doc.line(Math.min(e.line, view.state.doc.lines));
          var from = Math.min(line.from + Math.max((e.column || 1) - 1, 0), line.to);
          range = { from: from, to: Math.max(from + 1, line.to) };
        } else {
          range = locate(view.state, e.field);
        }
        if (!range) range = { from: 0, to: Math.min(1, view.state.doc.length) };
        range.to = Math.min(range.to, view.state.doc.length);
        range.from = Math.min(range.from, range.to);
        return [{ from: range.from, to: range.to, severity: "error", message: e.code + ": " + e.message }];
      })
      .catch(function () {
        return [];
      });
  }

  // --- completing hashes by the kind the reference needs -------------------------------------

  function kindFor(refName) {
    if (refName === "llm_source_ref") return components.llm_sources || [];
    if (refName === "source_ref") return components.tool_sources || [];
    if (/schema_ref$/.test(refName)) return components.schemas || [];
    return null;
  }

  function propertyName(state, prop) {
    var key = prop && prop.getChild("PropertyName");
    if (!key) return "";
    try {
      return JSON.parse(state.sliceDoc(key.from, key.to));
    } catch (e) {
      return "";
    }
  }

  function hashCompletions(context) {
    var node = CM.syntaxTree(context.state).resolveInner(context.pos, -1);
    if (node.name !== "String") return null;
    var prop = node.parent;
    if (!prop || prop.name !== "Property" || propertyName(context.state, prop) !== "hash") return null;
    var object = prop.parent;
    var ref = object && object.parent;
    var choices = ref && ref.name === "Property" ? kindFor(propertyName(context.state, ref)) : null;
    if (!choices) return null;
    var text = context.state.sliceDoc(node.from, node.to);
    var to = text.length > 1 && text.slice(-1) === '"' ? node.to - 1 : node.to;
    return {
      from: node.from + 1,
      to: to,
      filter: false,
      options: choices.map(function (c) {
        return { label: c.hash, detail: c.label, info: c.detail, type: "constant" };
      }),
    };
  }

  // --- the editor ------------------------------------------------------------------------------

  var view = new CM.EditorView({
    parent: host,
    state: CM.EditorState.create({
      doc: textarea.value,
      extensions: [
        CM.editorSetup,
        CM.colorScheme(), // light or dark as the page is, and switching when the page does
        CM.json(),
        CM.linter(serverLint, { delay: 500 }),
        CM.autocompletion({ override: [hashCompletions] }),
        CM.EditorView.lineWrapping,
        CM.EditorView.contentAttributes.of({ "aria-label": "Workflow JSON" }),
        CM.EditorView.updateListener.of(function (update) {
          if (!update.docChanged) return;
          textarea.value = update.state.doc.toString();
          schedulePrompts();
        }),
      ],
    }),
  });
  textarea.hidden = true;
  textarea.removeAttribute("hx-trigger");
  window.chukwaEditor = view; // for tests and the console

  // --- insert a reference ----------------------------------------------------------------------

  var refBox = document.getElementById("author-ref");
  if (refBox) {
    refBox.hidden = false;
    document.getElementById("ref-insert").addEventListener("click", function () {
      var hash = document.getElementById("ref-pick").value;
      if (!hash) return;
      var sel = view.state.selection.main;
      var node = CM.syntaxTree(view.state).resolveInner(sel.head, -1);
      var change;
      if (node.name === "String" && propertyName(view.state, node.parent) === "hash") {
        change = { from: node.from, to: node.to, insert: JSON.stringify(hash) };
      } else {
        change = { from: sel.from, to: sel.to, insert: JSON.stringify({ hash: hash }) };
      }
      view.dispatch({ changes: change });
      view.focus();
    });
  }

  // --- prompts as multi-line text --------------------------------------------------------------

  var promptsCard = document.getElementById("author-prompts-card");
  var promptsBox = document.getElementById("author-prompts");
  var promptTimer = null;

  function schedulePrompts() {
    clearTimeout(promptTimer);
    promptTimer = setTimeout(renderPrompts, 400);
  }

  function renderPrompts() {
    if (!promptsBox || promptsBox.contains(document.activeElement)) return;
    promptsCard.hidden = false;
    promptsBox.textContent = "";
    var workflow;
    try {
      workflow = JSON.parse(view.state.doc.toString());
    } catch (e) {
      var off = document.createElement("p");
      off.className = "author-prompts-off";
      off.textContent = "Fix the JSON above to edit the prompts here.";
      promptsBox.appendChild(off);
      return;
    }
    var nodes = (workflow && Array.isArray(workflow.nodes) && workflow.nodes) || [];
    var any = false;
    nodes.forEach(function (node, n) {
      var messages = node && node.prompt_template && node.prompt_template.messages;
      if (!Array.isArray(messages)) return;
      any = true;
      var box = document.createElement("section");
      box.className = "author-prompt-node";
      var title = document.createElement("h3");
      title.textContent = "node " + (node.id || n) + " (" + (node.type || "?") + ")";
      box.appendChild(title);
      messages.forEach(function (message, m) {
        if (!message || typeof message.content !== "string") return;
        var wrap = document.createElement("div");
        wrap.className = "author-prompt";
        var id = "prompt-" + n + "-" + m;
        var label = document.createElement("label");
        label.setAttribute("for", id);
        label.textContent = (message.role || "message") + " · message " + (m + 1);
        var field = document.createElement("textarea");
        field.id = id;
        field.value = message.content;
        field.rows = Math.min(Math.max(message.content.split("\n").length + 1, 3), 18);
        field.setAttribute("data-node", n);
        field.setAttribute("data-message", m);
        field.spellcheck = true;
        field.addEventListener("input", writePrompt);
        wrap.appendChild(label);
        wrap.appendChild(field);
        box.appendChild(wrap);
      });
      promptsBox.appendChild(box);
    });
    if (!any) {
      var none = document.createElement("p");
      none.className = "muted";
      none.textContent = "No LLM node has a prompt template.";
      promptsBox.appendChild(none);
    }
  }

  function writePrompt(event) {
    var field = event.target;
    var workflow;
    try {
      workflow = JSON.parse(view.state.doc.toString());
    } catch (e) {
      return;
    }
    var n = Number(field.getAttribute("data-node"));
    var m = Number(field.getAttribute("data-message"));
    workflow.nodes[n].prompt_template.messages[m].content = field.value;
    view.dispatch({
      changes: { from: 0, to: view.state.doc.length, insert: JSON.stringify(workflow, null, 2) },
    });
  }

  renderPrompts();
  CM.forceLinting(view);
})();
