// The element builders shared by the widgets, the only ones:
//   h("button", { class: "btn", onclick: handler, text: "Stop" })
//   h("div", { class: "row" }, child1, child2)
//   button("Stop", "stop", handler)   a control: <button class="kt-button" data-action="stop">
//   svg("line", { class: "kt-seq-line", x1: 0, x2: 10 }, "optional text")
// h: `class` sets className, `text` sets textContent, `on*` adds an event listener, any
// other key is an attribute (skipped when null or undefined).
// svg: an element in the SVG namespace; every key is an attribute (skipped when null or
// undefined), `text` (when not null) its textContent.
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

/** A control button; `data-action` names it for the tests and the stylesheet. */
export function button(label, action, onclick, cls = "kt-button") {
  return h("button", { class: cls, type: "button", "data-action": action, text: label, onclick });
}

const SVG = "http://www.w3.org/2000/svg";

export function svg(tag, attrs = {}, text) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) if (v != null) el.setAttribute(k, v);
  if (text != null) el.textContent = text;
  return el;
}
