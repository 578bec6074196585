// The calls tab: per process, the calls nested as they were made, each with its return
// (or exception) and duration. Built from the most recent log entries.

import { formatDuration, entryOutcome, functionLabel } from "./format.js";

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
      const list = document.createElement("ul");
      list.className = "kt-tree-list";
      tree.roots.forEach((node) => list.appendChild(renderNode(node)));
      section.appendChild(list);
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
