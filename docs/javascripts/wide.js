// Wide content. Tables wider than the text column scroll sideways (Material wraps each in
// .md-typeset__scrollwrap). Say so: a line above the table, and a fade on
// the side that has more (docs/stylesheets/extra.css), updated as the
// reader scrolls and as the window changes size. Diagrams get a box of
// their own that scrolls, so that they keep a readable width on a phone.
(function () {
  const zh = document.documentElement.lang.startsWith("zh")
  const hint = zh ? "表格较宽，可左右滑动查看 ↔" : "Wide table: scroll sideways ↔"
  const mark = wrap => {
    const more = wrap.scrollWidth - wrap.clientWidth
    wrap.classList.toggle("more-left", more > 1 && wrap.scrollLeft > 1)
    wrap.classList.toggle("more-right", more > 1 && wrap.scrollLeft < more - 1)
    const prev = wrap.previousElementSibling
    const has = prev && prev.classList.contains("scroll-hint")
    if (more > 1 && !has) {
      const p = document.createElement("p")
      p.className = "scroll-hint"
      p.textContent = hint
      wrap.before(p)
    } else if (more <= 1 && has) {
      prev.remove()
    }
  }
  const all = () => document.querySelectorAll(".md-typeset__scrollwrap").forEach(mark)
  const start = () => {
    const box = () => document.querySelectorAll(".mermaid").forEach(d => {
      if (d.parentElement.classList.contains("diagram-scroll")) return
      const wrap = document.createElement("div")
      wrap.className = "diagram-scroll"
      d.before(wrap)
      wrap.appendChild(d)  // Material's drawing (a shadow root) moves with its element
    })
    box()
    new MutationObserver(box).observe(document.querySelector(".md-content") || document.body,
                                      { childList: true, subtree: true })
    document.querySelectorAll(".md-typeset__scrollwrap").forEach(wrap =>
      wrap.addEventListener("scroll", () => mark(wrap), { passive: true }))
    all()
    window.addEventListener("resize", all)
    // a table inside a tab has no width until its tab opens
    document.addEventListener("change", e => { if (e.target.matches(".tabbed-set > input")) all() })
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start)
  else start()
})()
