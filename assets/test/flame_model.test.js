// The Flame tab's data (src/flame_model.js): the icicle layout of the server's flat tree,
// the node under a point, zoom by frame path, search; and its cost with 100 000 stacks
// (issue 38.3: under 100 ms an interaction; the browser test measures the drawing too).
import { describe, it, expect } from "vitest";
import { FlameModel } from "../src/flame_model.js";

// run -> a -> leaf, run -> b -> leaf (the shape of KinoTrace.Widget.FlamePayload's doc)
const frames = ["M.run/0", "M.a/0", "M.leaf/0", "M.b/1", "M.loop/1 [no return]"];
const payload = {
  frames,
  // [parent, frame, total, self]
  nodes: [-1, -1, 1000, 0, 0, 0, 1000, 100, 1, 1, 600, 200, 2, 2, 400, 400, 1, 3, 300, 100, 4, 2, 200, 200],
  no_return: [4],
  processes: [{ pid: "#PID<0.1.0>", name: null, total: 1000 }],
  process: null,
  omitted: 0,
};

/** A tree of `n` nodes in preorder, up to `depth` deep, frames from a pool. */
export function synthetic(n, { depth = 24, pool = 4000, seed = 7 } = {}) {
  let s = seed;
  const rand = () => ((s = (s * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
  const framesOut = Array.from({ length: pool }, (_, i) => `App.Module${i % 97}.fun_${i}/${i % 4}`);
  const nodes = [-1, -1, 0, 0];
  const stack = [0];
  const depthOf = [0];
  while (nodes.length / 4 < n) {
    // climb up at random, then add a child
    while (stack.length > 1 && (depthOf[stack[stack.length - 1]] >= depth || rand() < 0.3)) stack.pop();
    const parent = stack[stack.length - 1];
    const i = nodes.length / 4;
    nodes.push(parent, Math.floor(rand() * pool), 0, 1 + Math.floor(rand() * 1000));
    depthOf[i] = depthOf[parent] + 1;
    stack.push(i);
  }
  // totals bottom-up (children come after their parent)
  for (let i = nodes.length / 4 - 1; i >= 0; i--) {
    nodes[i * 4 + 2] += nodes[i * 4 + 3];
    const p = nodes[i * 4];
    if (p >= 0) nodes[p * 4 + 2] += nodes[i * 4 + 2];
  }
  return { frames: framesOut, nodes, no_return: [], processes: [], process: null, omitted: 0 };
}

describe("FlameModel", () => {
  const m = new FlameModel(payload);

  it("lays the tree out: depth, start and the per-depth order", () => {
    expect(m.size).toBe(6);
    expect(Array.from(m.depth)).toEqual([0, 1, 2, 3, 2, 3]);
    // run's children a (600) then b (300); b starts where a ends
    expect(Array.from(m.x)).toEqual([0, 0, 0, 0, 600, 600]);
    expect(m.maxDepth).toBe(3);
    expect(m.name(0)).toBe("all");
    expect(m.name(4)).toBe("M.b/1");
    expect(m.isNoReturn(5) || m.isNoReturn(1)).toBe(false);
  });

  it("marks [no return] frames by the server's list", () => {
    const loop = new FlameModel({ ...payload, nodes: [-1, -1, 50, 0, 0, 4, 50, 0, 1, 2, 50, 50] });
    expect(loop.isNoReturn(1)).toBe(true);
    expect(loop.isNoReturn(2)).toBe(false);
  });

  it("finds the node under a point, the focus's callers spanning the width", () => {
    expect(m.hit(0, 2, 0.1)).toBe(2); // a
    expect(m.hit(0, 2, 0.7)).toBe(4); // b
    expect(m.hit(0, 2, 0.95)).toBe(-1); // run's self time: nothing below
    expect(m.hit(0, 9, 0.5)).toBe(-1);
    // zoomed on b: b and its callers are the whole width, b's leaf half of it
    expect(m.hit(4, 1, 0.99)).toBe(1);
    expect(m.hit(4, 2, 0.01)).toBe(4);
    expect(m.hit(4, 3, 0.5)).toBe(5);
  });

  it("keeps a zoom across updates by frame path", () => {
    expect(m.framePath(5)).toEqual(["M.run/0", "M.b/1", "M.leaf/0"]);
    expect(m.find(["M.run/0", "M.b/1", "M.leaf/0"])).toBe(5);
    expect(m.find(["M.run/0", "M.gone/0"])).toBe(1);
    expect(m.find([])).toBe(0);
  });

  it("searches frames; the time of nested matches counts once", () => {
    const leaf = m.search("LEAF");
    expect([leaf.count, leaf.time]).toEqual([2, 600]);
    const all = m.search("M.");
    expect([all.count, all.time]).toEqual([5, 1000]);
    // within the zoom on b
    expect(m.search("leaf", 4).time).toBe(200);
    expect(m.search("run", 4).time).toBe(300);
    expect(m.search("  ").count).toBe(0);
  });

  it("stays well under 100 ms an interaction with 100 000 distinct stacks", () => {
    const big = synthetic(100_000);
    let t = performance.now();
    const model = new FlameModel(big);
    const build = performance.now() - t;
    expect(model.size).toBe(100_000);
    // a hover: the node under the mouse, at every depth
    t = performance.now();
    for (let k = 0; k < 1000; k++) model.hit(0, 1 + (k % model.maxDepth), (k * 0.618) % 1);
    const hits = (performance.now() - t) / 1000;
    // a search over every frame
    t = performance.now();
    const found = model.search("fun_1");
    const search = performance.now() - t;
    expect(found.count).toBeGreaterThan(0);
    // a zoom: the frames in view at each depth
    const focus = model.byDepth[model.rowStart[2]];
    t = performance.now();
    let drawn = 0;
    for (let d = 3; d <= model.maxDepth; d++) {
      const [lo, hi] = model.row(d, model.x[focus], model.x[focus] + model.total[focus]);
      drawn += hi - lo;
    }
    const zoom = performance.now() - t;
    console.log(`100k stacks: build ${build.toFixed(1)} ms, hit ${hits.toFixed(3)} ms, search ${search.toFixed(1)} ms, zoom rows ${zoom.toFixed(1)} ms (${drawn} frames)`);
    expect(build).toBeLessThan(1000);
    expect(hits).toBeLessThan(5);
    expect(search).toBeLessThan(100);
    expect(zoom).toBeLessThan(100);
  });
});
