// A tiny element builder shared by the widgets:
//   h("button", { class: "btn", onclick: handler, text: "Stop" })
//   h("div", { class: "row" }, child1, child2)
// `class` sets className, `text` sets textContent, `on*` adds an event listener, any
// other key is an attribute (skipped when null or undefined).
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") el.className = value;
    else if (key === "text") el.textContent = value;
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (value != null) el.setAttribute(key, value);
  }
  el.append(...children);
  return el;
}
