window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex"
  }
};

// On instant navigation, typeset the new page. On the first page load
// MathJax is still starting (it typesets that page itself when ready), so
// there is nothing to do yet. (SVG output has no font cache to clear.)
document$.subscribe(() => {
  if (!MathJax.startup || !MathJax.startup.output) return
  MathJax.typesetClear()
  MathJax.texReset()
  MathJax.typesetPromise()
})
