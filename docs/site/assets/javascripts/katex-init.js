// Renders pymdownx.arithmatex's generic output (\(...\) in a span, \[...\] in a div) with the
// KaTeX shipped beside this file: the site loads nothing from outside itself.
document.addEventListener("DOMContentLoaded", function () {
  for (const el of document.querySelectorAll(".arithmatex")) {
    const display = el.tagName === "DIV";
    const tex = el.textContent.trim().replace(display ? /^\\\[|\\\]$/g : /^\\\(|\\\)$/g, "");
    katex.render(tex, el, { displayMode: display, throwOnError: false });
  }
});
