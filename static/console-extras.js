// agentos console, small helpers loaded as a file (the CSP admits no inline script):
// - "Copy" buttons for a secret shown once (a new API token). A button names its text's element
//   by id (data-copy); it stays hidden without JavaScript, where the text itself is selected in
//   one tap (.token-once).
// - A folded part of a live card (details[data-keep-open]) stays open when htmx swaps the card
//   with fresh values: the run page re-reads its status card on every step.
(function () {
  "use strict";

  function selectText(el) {
    const range = document.createRange();
    range.selectNodeContents(el);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }

  async function copy(text, el) {
    if (navigator.clipboard && window.isSecureContext) {
      try {
        await navigator.clipboard.writeText(text);
        return true;
      } catch (err) {
        // Refused (no permission, no focus): fall back to the selection below.
      }
    }
    selectText(el);
    try {
      return document.execCommand("copy");
    } catch (err) {
      return false;
    }
  }

  function setup(button) {
    const id = button.dataset.copy;
    const source = document.getElementById(id);
    if (!source) return;
    const said = document.querySelector('[data-copied="' + id + '"]');
    button.hidden = false;
    button.addEventListener("click", async () => {
      const done = await copy(source.textContent.trim(), source);
      if (said) said.textContent = done ? button.dataset.copiedText : button.dataset.failedText;
    });
  }

  const opened = new Set();

  function keepOpen(root) {
    root.querySelectorAll("details[data-keep-open]").forEach((details) => {
      if (opened.has(details.dataset.keepOpen)) details.open = true;
      details.addEventListener("toggle", () => {
        if (details.open) opened.add(details.dataset.keepOpen);
        else opened.delete(details.dataset.keepOpen);
      });
    });
  }

  function init(root) {
    root.querySelectorAll("button[data-copy]").forEach(setup);
    keepOpen(root);
  }

  // htmx (its own and out-of-band swaps) says what it put in the page.
  document.addEventListener("htmx:load", (event) => {
    if (event.target instanceof Element) keepOpen(event.target);
  });

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", () => init(document), { once: true });
  } else {
    init(document);
  }
})();
