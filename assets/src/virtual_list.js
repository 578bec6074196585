// A virtualised list of fixed-height rows: only the rows in view (plus a margin) exist
// in the DOM, so it holds hundreds of thousands of entries. While scrolled to the end,
// it follows new rows; scrolled up, it stays put.

/** The rows to render for a scroll position: {first, last} (last exclusive). */
export function visibleRange(scrollTop, viewportHeight, rowHeight, length, overscan = 8) {
  // a list that just shrank may still report its old scroll position
  scrollTop = Math.max(0, Math.min(scrollTop, length * rowHeight - viewportHeight));
  const first = Math.max(0, Math.floor(scrollTop / rowHeight) - overscan);
  const last = Math.min(length, Math.ceil((scrollTop + viewportHeight) / rowHeight) + overscan);
  return { first, last: Math.max(first, last) };
}

export class VirtualList {
  /**
   * @param {HTMLElement} parent where the list goes
   * @param {object} opts rowHeight, length(), item(i), createRow(), renderRow(el, item, i), onSelect(item, i)
   */
  constructor(parent, opts) {
    this.opts = opts;
    this.rowHeight = opts.rowHeight;
    this.follow = true;
    this.pool = [];
    this.selected = null;

    this.scroller = document.createElement("div");
    this.scroller.className = "kt-vlist";
    this.scroller.setAttribute("role", "list");
    this.spacer = document.createElement("div");
    this.spacer.className = "kt-vlist-spacer";
    this.scroller.appendChild(this.spacer);
    parent.appendChild(this.scroller);

    this.scroller.addEventListener("scroll", () => {
      this.follow = this.atEnd();
      this.render();
    });
    this.scroller.addEventListener("click", (event) => {
      const row = event.target.closest(".kt-row");
      if (!row || row.dataset.index == null) return;
      const i = Number(row.dataset.index);
      const item = this.opts.item(i);
      this.selected = item;
      this.render();
      this.opts.onSelect && this.opts.onSelect(item, i);
    });
    this.length = 0;
    // the viewport's height, kept by a ResizeObserver: render() reads no layout, so an
    // update during a flood forces none (issue 39 item 12)
    this.viewportHeight = 0;
    if (typeof ResizeObserver === "function") {
      new ResizeObserver(([entry]) => {
        const height = entry.contentRect.height;
        if (height !== this.viewportHeight) {
          this.viewportHeight = height;
          this.render();
        }
      }).observe(this.scroller);
    }
  }

  atEnd() {
    const s = this.scroller;
    return s.scrollTop + s.clientHeight >= s.scrollHeight - this.rowHeight;
  }

  /** Call after the items changed (appended, filtered, cleared). */
  update() {
    const following = this.follow;
    this.length = this.opts.length();
    this.spacer.style.height = `${this.length * this.rowHeight}px`;
    // (the spacer's height, not scrollHeight: reading it would lay the page out now)
    if (following) this.scroller.scrollTop = this.length * this.rowHeight;
    this.render(following);
  }

  scrollToEnd() {
    this.follow = true;
    this.scroller.scrollTop = this.scroller.scrollHeight;
    this.render();
  }

  /** Draws the rows in view; `atEnd`: scrolled to the end (no need to read where). */
  render(atEnd = false) {
    const height = this.viewportHeight || this.scroller.clientHeight || 400;
    const top = atEnd ? this.length * this.rowHeight : this.scroller.scrollTop;
    const { first, last } = visibleRange(top, height, this.rowHeight, this.length);
    const needed = last - first;
    while (this.pool.length < needed) {
      const el = this.opts.createRow();
      el.classList.add("kt-row");
      el.style.height = `${this.rowHeight}px`;
      this.scroller.appendChild(el);
      this.pool.push(el);
    }
    for (let k = 0; k < this.pool.length; k++) {
      const el = this.pool[k];
      if (k < needed) {
        const i = first + k;
        const item = this.opts.item(i);
        el.style.display = "";
        el.style.transform = `translateY(${i * this.rowHeight}px)`;
        el.dataset.index = String(i);
        el.classList.toggle("kt-selected", item != null && item === this.selected);
        this.opts.renderRow(el, item, i);
      } else if (el.style.display !== "none") {
        el.style.display = "none";
        delete el.dataset.index;
      }
    }
  }
}
