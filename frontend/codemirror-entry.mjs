// The CodeMirror 6 parts the workflow editor uses, bundled into one script that exposes them as
// window.ChukwaCM (static/vendor/codemirror-<version>.min.js; see README.md).
//
// Colours follow the page: the editor's ground, text, gutters and lines are the site's own CSS
// variables (static/chukwa/site.css switches them under prefers-color-scheme: dark), and
// colorScheme() swaps the syntax colours and CodeMirror's light/dark base theme (tooltips,
// selection, lint panel) when the preference changes, without reloading the editor.
import {
  autocompletion,
  closeBrackets,
  closeBracketsKeymap,
  completionKeymap,
} from "@codemirror/autocomplete";
import { defaultKeymap, history, historyKeymap, indentWithTab } from "@codemirror/commands";
import { json } from "@codemirror/lang-json";
import {
  bracketMatching,
  defaultHighlightStyle,
  foldGutter,
  foldKeymap,
  indentOnInput,
  syntaxHighlighting,
  syntaxTree,
} from "@codemirror/language";
import { lintGutter, linter, lintKeymap, forceLinting } from "@codemirror/lint";
import { highlightSelectionMatches, searchKeymap } from "@codemirror/search";
import { Compartment, EditorState } from "@codemirror/state";
import { oneDarkHighlightStyle } from "@codemirror/theme-one-dark";
import {
  drawSelection,
  EditorView,
  highlightActiveLine,
  highlightActiveLineGutter,
  keymap,
  lineNumbers,
  ViewPlugin,
} from "@codemirror/view";

const editorSetup = [
  lineNumbers(),
  highlightActiveLineGutter(),
  foldGutter(),
  drawSelection(),
  history(),
  indentOnInput(),
  bracketMatching(),
  closeBrackets(),
  highlightActiveLine(),
  highlightSelectionMatches(),
  lintGutter(),
  keymap.of([
    ...closeBracketsKeymap,
    ...defaultKeymap,
    ...searchKeymap,
    ...historyKeymap,
    ...foldKeymap,
    ...completionKeymap,
    ...lintKeymap,
    indentWithTab,
  ]),
];

// --- light and dark, as the page is ------------------------------------------------------------

const pageColours = (dark) =>
  EditorView.theme(
    {
      "&": { color: "var(--fg)", backgroundColor: "var(--card)" },
      ".cm-content": { caretColor: "var(--fg)" },
      ".cm-cursor, .cm-dropCursor": { borderLeftColor: "var(--fg)" },
      ".cm-gutters": {
        backgroundColor: "var(--bg)",
        color: "var(--muted)",
        borderRight: "1px solid var(--line)",
      },
      ".cm-activeLine": { backgroundColor: dark ? "#1e2433" : "#f1f4fc" },
      ".cm-activeLineGutter": { backgroundColor: dark ? "#1e2433" : "#e6ebf7", color: "var(--fg)" },
      "&.cm-focused > .cm-scroller > .cm-selectionLayer .cm-selectionBackground, .cm-selectionBackground, .cm-content ::selection":
        { backgroundColor: dark ? "#2b3a67" : "#d3defb" },
      ".cm-selectionMatch": { backgroundColor: dark ? "#2a3a2a" : "#e3f6ea" },
      "&.cm-focused .cm-matchingBracket": { backgroundColor: dark ? "#2b3a67" : "#d3defb" },
      ".cm-foldPlaceholder": {
        backgroundColor: "var(--bg)",
        border: "1px solid var(--line)",
        color: "var(--muted)",
      },
      ".cm-tooltip": {
        backgroundColor: "var(--card)",
        color: "var(--fg)",
        border: "1px solid var(--line)",
      },
      ".cm-tooltip-autocomplete > ul > li[aria-selected]": {
        backgroundColor: "var(--accent)",
        color: dark ? "#0f131b" : "#fff",
      },
      ".cm-panels": { backgroundColor: "var(--bg)", color: "var(--fg)" },
    },
    { dark }
  );

const schemeFor = (dark) => [
  pageColours(dark),
  syntaxHighlighting(dark ? oneDarkHighlightStyle : defaultHighlightStyle, { fallback: true }),
];

const darkQuery =
  typeof window.matchMedia === "function" ? window.matchMedia("(prefers-color-scheme: dark)") : null;
const isDark = () => !!(darkQuery && darkQuery.matches);

// The page's colour scheme, followed while the editor lives (the site has no toggle of its own:
// it follows the system's preference, and so does the editor).
function colorScheme() {
  const scheme = new Compartment();
  const follow = ViewPlugin.define((view) => {
    const onChange = () => view.dispatch({ effects: scheme.reconfigure(schemeFor(isDark())) });
    if (darkQuery) darkQuery.addEventListener("change", onChange);
    return {
      destroy() {
        if (darkQuery) darkQuery.removeEventListener("change", onChange);
      },
    };
  });
  return [scheme.of(schemeFor(isDark())), follow];
}

window.ChukwaCM = {
  colorScheme,
  EditorState,
  EditorView,
  autocompletion,
  editorSetup,
  forceLinting,
  json,
  linter,
  syntaxTree,
};
