// The Webhooks screen's copy buttons: shown only where the clipboard can be written; what
// they say comes from the page (translated there).
(() => {
  "use strict";
  const said = document.querySelector("[data-copied]");
  for (const button of document.querySelectorAll("[data-copy]")) {
    if (!navigator.clipboard) continue;
    button.hidden = false;
    button.addEventListener("click", async () => {
      const source = document.getElementById(button.dataset.copy);
      try {
        await navigator.clipboard.writeText(source.textContent.trim());
        if (said) said.textContent = button.dataset.done;
      } catch {
        if (said) said.textContent = said.dataset.failed;
      }
    });
  }
})();
