// The Flame tab's data, without the DOM: the server's tree of frames
// (KinoTrace.Widget.FlamePayload: flat nodes [parent, frame, total_ns, self_ns], node 0
// the root, parents before children, siblings consecutive) laid out as an icicle: each
// node's depth and its start `x` (ns from the root's start), and per depth the nodes in
// x order, so drawing a zoomed view, finding the node under the mouse and searching
// stay proportional to what shows, not to the 100 000 stacks a trace may have.

export class FlameModel {
  /** @param {object} payload the "flame" reply (assets/wire.schema.json) */
  constructor(payload) {
    const flat = payload.nodes || [];
    const n = Math.max(1, Math.floor(flat.length / 4));
    this.size = n;
    this.frames = payload.frames || [];
    this.noReturn = new Uint8Array(this.frames.length);
    for (const f of payload.no_return || []) if (f >= 0 && f < this.frames.length) this.noReturn[f] = 1;
    this.parent = new Int32Array(n).fill(-1);
    this.frame = new Int32Array(n).fill(-1);
    this.total = new Float64Array(n);
    this.self = new Float64Array(n);
    this.depth = new Int32Array(n);
    this.x = new Float64Array(n);
    const cursor = new Float64Array(n); // where a node's next child starts
    let maxDepth = 0;
    for (let i = 0; i < n && i * 4 + 3 < flat.length; i++) {
      const p = flat[i * 4];
      this.frame[i] = flat[i * 4 + 1];
      this.total[i] = flat[i * 4 + 2];
      this.self[i] = flat[i * 4 + 3];
      if (i > 0 && p >= 0 && p < i) {
        this.parent[i] = p;
        this.depth[i] = this.depth[p] + 1;
        this.x[i] = cursor[p];
        cursor[p] += this.total[i];
      }
      cursor[i] = this.x[i];
      if (this.depth[i] > maxDepth) maxDepth = this.depth[i];
    }
    this.maxDepth = maxDepth;
    // per depth, the nodes by x (preorder visits each depth's nodes left to right)
    const counts = new Int32Array(maxDepth + 2);
    for (let i = 0; i < n; i++) counts[this.depth[i] + 1]++;
    for (let d = 1; d < counts.length; d++) counts[d] += counts[d - 1];
    this.rowStart = counts.slice(); // nodes of depth d: byDepth[rowStart[d] .. rowStart[d + 1])
    this.byDepth = new Int32Array(n);
    const fill = counts.slice(0, maxDepth + 1);
    for (let i = 0; i < n; i++) this.byDepth[fill[this.depth[i]]++] = i;
    this.processes = payload.processes || [];
    this.process = payload.process ?? null;
    this.omitted = payload.omitted || 0;
  }

  /** The end (exclusive) of a node's subtree in preorder. */
  subtreeEnd(i) {
    let j = i + 1;
    while (j < this.size && this.depth[j] > this.depth[i]) j++;
    return j;
  }

  /** A node's frame name ("all" for the root). */
  name(i) {
    return i === 0 ? "all" : this.frames[this.frame[i]] ?? "";
  }

  /** The call's end is not known ([no return]): its own time is unknown. */
  isNoReturn(i) {
    return i > 0 && this.noReturn[this.frame[i]] === 1;
  }

  /** The nodes from the root down to `i`, root first. */
  path(i) {
    const out = [];
    for (let j = i; j >= 0; j = this.parent[j]) out.push(j);
    return out.reverse();
  }

  /** The frame names from the root's child down to `i` (a node's identity across updates). */
  framePath(i) {
    return this.path(i).slice(1).map((j) => this.name(j));
  }

  /** The node at the end of a frame path, or the deepest one of it that exists. */
  find(names) {
    let node = 0;
    for (const name of names || []) {
      const next = this.childNamed(node, name);
      if (next < 0) break;
      node = next;
    }
    return node;
  }

  childNamed(node, name) {
    const d = this.depth[node] + 1;
    if (d > this.maxDepth) return -1;
    const [lo, hi] = this.row(d, this.x[node], this.x[node] + this.total[node]);
    for (let k = lo; k < hi; k++) {
      const j = this.byDepth[k];
      if (this.parent[j] === node && this.name(j) === name) return j;
    }
    return -1;
  }

  /**
   * The index range in byDepth of depth `d`'s nodes that overlap [from, to): binary
   * searches for the first node ending after `from` and the first starting at `to`.
   */
  row(d, from, to) {
    const start = this.rowStart[d];
    const end = this.rowStart[d + 1];
    let lo = start;
    let hi = end;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      const j = this.byDepth[mid];
      if (this.x[j] + this.total[j] <= from) lo = mid + 1;
      else hi = mid;
    }
    // then the first that starts at `to` or after
    let last = lo;
    hi = end;
    while (last < hi) {
      const mid = (last + hi) >> 1;
      if (this.x[this.byDepth[mid]] < to) last = mid + 1;
      else hi = mid;
    }
    return [lo, last];
  }

  /** The first index in byDepth [k, hi) of a node that ends after `at` (their ends are in order). */
  endingAfter(k, hi, at) {
    let lo = k;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      const j = this.byDepth[mid];
      if (this.x[j] + this.total[j] <= at) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /**
   * The node under a point of a view zoomed on `focus`: at `depth`, at `fraction` (0..1)
   * of the view's width; -1 for none. The focus's ancestors span the whole width.
   */
  hit(focus, depth, fraction) {
    if (depth < 0 || depth > this.maxDepth) return -1;
    if (depth <= this.depth[focus]) {
      let j = focus;
      while (this.depth[j] > depth) j = this.parent[j];
      return j;
    }
    const at = this.x[focus] + fraction * this.total[focus];
    const [lo, hi] = this.row(depth, at, at);
    for (let k = lo; k < Math.min(hi + 1, this.rowStart[depth + 1]); k++) {
      const j = this.byDepth[k];
      if (this.x[j] <= at && at < this.x[j] + this.total[j]) return j;
    }
    return -1;
  }

  /**
   * The frames matching `query` (case-insensitive text), as a Uint8Array by frame, and
   * the time of the matching calls under `focus`, each counted once (a match inside a
   * match is in it already): {frames, count, time}. An empty query matches nothing.
   */
  search(query, focus = 0) {
    const q = (query || "").trim().toLowerCase();
    const frames = new Uint8Array(this.frames.length);
    if (!q) return { frames, count: 0, time: 0 };
    let count = 0;
    this.frames.forEach((name, f) => {
      if (name.toLowerCase().includes(q)) frames[f] = 1;
    });
    // a node is in a match when it or an ancestor matches (preorder: parents first)
    const inMatch = new Uint8Array(this.size);
    let time = 0;
    const end = this.subtreeEnd(focus);
    for (let j = 1; j < this.size; j++) {
      const hit = frames[this.frame[j]] === 1;
      const above = inMatch[this.parent[j]] === 1;
      inMatch[j] = hit || above ? 1 : 0;
      if (hit && j >= focus && j < end) {
        count++;
        if (!above || j === focus) time += this.total[j];
      }
    }
    // the focus inside a match: all of the view is
    if (focus > 0 && inMatch[this.parent[focus]]) time = this.total[focus];
    return { frames, count, time };
  }
}
