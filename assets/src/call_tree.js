// The calls tab: per process, the calls nested as they were made, each with its return
// (or exception) and duration. Built from the most recent log entries.
//
// Drawn live, during floods too: an open process shows its latest SHOWN_PER_PROCESS
// calls (the Log tab has every one), and a closed one none until it is opened, so a
// redraw stays a few hundred elements however many calls there are (thousands took
// the page ~0.5 s to lay out, and every tab switch waited for it).

import { formatDuration, entryOutcome, functionLabel } from "./format.js";

/** The calls an open process shows, the latest. */
export const SHOWN_PER_PROCESS = 100;

export class CallTree {
  constructor(parent) {
    this.el = document.createElement("div");
    this.el.className = "kt-tree";
    parent.appendChild(this.el);
    this.open = new Set(); // pids whose section is expanded
    this.autoOpened = false;
  }

  /** @param trees [{pid, label, roots: [{entry, children}]}] (see LogModel.callTrees) */
  render(trees) {
    if (!this.autoOpened && trees.length) {
      trees.slice(0, 3).forEach((t) => this.open.add(t.pid));
      this.autoOpened = true;
    }
    if (!trees.length) {
      const empty = document.createElement("div");
      empty.className = "kt-empty";
      empty.textContent = "No calls yet.";
      this.el.replaceChildren(empty);
      return;
    }
    const frag = document.createDocumentFragment();
    for (const tree of trees) {
      const section = document.createElement("details");
      section.className = "kt-tree-process";
      section.open = this.open.has(tree.pid);
      section.addEventListener("toggle", () => {
        if (section.open) this.open.add(tree.pid);
        else this.open.delete(tree.pid);
        if (section.open && !section.querySelector(".kt-tree-list")) section.appendChild(renderList(tree.roots));
      });
      const summary = document.createElement("summary");
      const name = document.createElement("span");
      name.className = "kt-mono kt-tree-pid";
      name.textContent = tree.label;
      const count = document.createElement("span");
      count.className = "kt-muted";
      count.textContent = `${countNodes(tree.roots)} calls`;
      summary.append(name, count);
      if (tree.label !== tree.pid && tree.pid) {
        const pid = document.createElement("span");
        pid.className = "kt-muted kt-mono";
        pid.textContent = tree.pid;
        summary.insertBefore(pid, count);
      }
      section.appendChild(summary);
      if (section.open) section.appendChild(renderList(tree.roots));
      frag.appendChild(section);
    }
    this.el.replaceChildren(frag);
  }
}

function countNodes(nodes) {
  let n = 0;
  const stack = [...nodes];
  while (stack.length) {
    const node = stack.pop();
    n++;
    stack.push(...node.children);
  }
  return n;
}

/**
 * The latest `max` calls of `roots` (whole trees from the end, the oldest of them cut
 * at its start): [{node, children: [...]}] to draw, and how many calls are left out.
 */
export function latestCalls(roots, max = SHOWN_PER_PROCESS) {
  let left = max;
  const shown = [];
  for (let i = roots.length - 1; i >= 0 && left > 0; i--) {
    shown.push(keep(roots[i]));
  }
  shown.reverse();
  return { shown, hidden: countNodes(roots) - (max - left) };

  // a node and its children, newest first, while the budget lasts
  function keep(node) {
    left--;
    const children = [];
    for (let j = node.children.length - 1; j >= 0 && left > 0; j--) children.push(keep(node.children[j]));
    children.reverse();
    return { entry: node.entry, children };
  }
}

/** A list of call trees ({entry, children} nodes, as LogModel.callTrees gives them). */
export function renderList(roots) {
  const { shown, hidden } = latestCalls(roots);
  const list = document.createElement("ul");
  list.className = "kt-tree-list";
  if (hidden > 0) {
    const more = document.createElement("li");
    more.className = "kt-tree-more kt-muted";
    more.textContent = `${hidden} earlier call${hidden === 1 ? "" : "s"} not shown (the Log tab has them)`;
    list.appendChild(more);
  }
  shown.forEach((node) => list.appendChild(renderNode(node)));
  return list;
}

function renderNode(node) {
  const li = document.createElement("li");
  const line = document.createElement("div");
  line.className = "kt-tree-line";
  const call = document.createElement("span");
  call.className = "kt-mono kt-call";
  call.textContent = node.entry.call || functionLabel(node.entry);
  line.appendChild(call);
  const outcome = entryOutcome(node.entry);
  if (outcome) {
    const out = document.createElement("span");
    out.className = node.entry.exception != null ? "kt-mono kt-exception" : "kt-mono kt-result";
    out.textContent = outcome;
    line.appendChild(out);
  }
  if (node.entry.duration != null) {
    const d = document.createElement("span");
    d.className = "kt-duration";
    d.textContent = formatDuration(node.entry.duration);
    line.appendChild(d);
  }
  li.appendChild(line);
  if (node.children.length) {
    const ul = document.createElement("ul");
    ul.className = "kt-tree-list";
    node.children.forEach((child) => ul.appendChild(renderNode(child)));
    li.appendChild(ul);
  }
  return li;
}
