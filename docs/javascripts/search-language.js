// Search results in the reader's language first. One index serves both
// languages (docs/hooks/search.py), and Material lists results by score
// alone, so for a word both languages use (TMA, wgmma) a Chinese page can
// top an English reader's list. As Material renders the results, those of
// the page's own language are moved before the others, each group in
// Material's order.
(function () {
  const config = document.getElementById("__config")
  if (!config) return
  let root
  try {
    const base = JSON.parse(config.textContent).base
    root = new URL(base.endsWith("/") ? base : base + "/", location.href).href
  } catch (e) {
    return  // no base to tell the languages apart (the 404 page): Material's order stands
  }
  const english = href => href.startsWith(root + "en/")
  const mine = english(location.href)
  const own = item => {
    const a = item.querySelector("a")
    return !a || english(a.href) === mine
  }
  let observer
  const sort = list => {
    const items = [...list.children]
    const order = items.filter(own).concat(items.filter(item => !own(item)))
    if (order.every((item, k) => item === items[k])) return
    observer.disconnect()
    order.forEach(item => list.appendChild(item))
    observer.observe(list, { childList: true })
  }
  const start = () => {
    const list = document.querySelector(".md-search-result__list")
    if (!list) return
    observer = new MutationObserver(() => sort(list))
    observer.observe(list, { childList: true })
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start)
  else start()
})()
