// A small Markdown renderer that builds DOM nodes and sets text only
// through textContent: model and tool output can never become markup,
// whatever it contains. It knows the parts models write: fenced code,
// headings, lists, quotes, paragraphs, and inline code, bold, italics and
// links (http, https and mailto only).

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

const safeURL = (u) => /^(https?:|mailto:)/i.test(u.trim());

// inline appends the inline Markdown of text to parent.
function inline(parent, text) {
  const re = /(`+)([\s\S]*?[^`])\1(?!`)|\*\*([^*]+)\*\*|(?<!\w)__([^_]+)__(?!\w)|\*([^*\s][^*]*)\*|\[([^\]]+)\]\(([^)\s]+)\)/g;
  let last = 0;
  let m;
  while ((m = re.exec(text)) !== null) {
    if (m.index > last) parent.append(document.createTextNode(text.slice(last, m.index)));
    if (m[1]) parent.append(el('code', '', m[2]));
    else if (m[3] || m[4]) { const b = el('strong'); inline(b, m[3] || m[4]); parent.append(b); }
    else if (m[5]) { const i = el('em'); inline(i, m[5]); parent.append(i); }
    else if (m[6]) {
      if (safeURL(m[7])) {
        const a = el('a', '', m[6]);
        a.href = m[7];
        a.target = '_blank';
        a.rel = 'noopener noreferrer';
        parent.append(a);
      } else parent.append(document.createTextNode(m[0]));
    }
    last = re.lastIndex;
  }
  if (last < text.length) parent.append(document.createTextNode(text.slice(last)));
}

// render returns the Markdown source as a fragment of DOM nodes.
export function render(src) {
  const frag = document.createDocumentFragment();
  const lines = String(src).replace(/\r\n?/g, '\n').split('\n');
  let para = [];
  let list = null;
  const flush = () => {
    if (para.length) {
      const p = el('p');
      para.forEach((l, i) => { if (i) p.append(el('br')); inline(p, l); });
      frag.append(p);
      para = [];
    }
  };
  const endList = () => { list = null; };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const fence = line.match(/^\s*(```+|~~~+)\s*([^`]*)$/);
    if (fence) {
      flush(); endList();
      const body = [];
      for (i++; i < lines.length && !lines[i].trim().startsWith(fence[1]); i++) body.push(lines[i]);
      const pre = el('pre', 'code');
      const lang = fence[2].trim();
      if (lang) pre.dataset.lang = lang.split(/\s+/)[0];
      pre.append(el('code', '', body.join('\n')));
      frag.append(pre);
      continue;
    }
    if (!line.trim()) { flush(); endList(); continue; }
    const h = line.match(/^(#{1,6})\s+(.*)$/);
    if (h) {
      flush(); endList();
      const e = el('h' + Math.min(h[1].length + 2, 6));
      inline(e, h[2]);
      frag.append(e);
      continue;
    }
    const q = line.match(/^>\s?(.*)$/);
    if (q) {
      flush(); endList();
      const b = el('blockquote');
      inline(b, q[1]);
      frag.append(b);
      continue;
    }
    const li = line.match(/^\s*([-*+]|\d+[.)])\s+(.*)$/);
    if (li) {
      flush();
      const tag = /\d/.test(li[1]) ? 'ol' : 'ul';
      if (!list || list.tagName.toLowerCase() !== tag) { list = el(tag); frag.append(list); }
      const item = el('li');
      inline(item, li[2]);
      list.append(item);
      continue;
    }
    endList();
    para.push(line);
  }
  flush();
  return frag;
}

export { el };
