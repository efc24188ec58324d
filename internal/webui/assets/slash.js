// Slash commands in the message box: typing "/" offers the
// conversation's commands (built-ins, prompt templates, skills, from
// GET .../commands); arrows move, Tab or Enter completes, Escape closes.
// Names and descriptions reach the page only as text.
import { el } from './md.js';

export function attachSlash(textarea, list, commands) {
  let shown = [];
  let sel = 0;

  const close = () => { list.hidden = true; list.replaceChildren(); shown = []; textarea.removeAttribute('aria-activedescendant'); };

  const render = () => {
    list.replaceChildren();
    shown.forEach((c, i) => {
      const li = el('li', 'slash-item' + (i === sel ? ' selected' : ''));
      li.id = 'slash-' + i;
      li.setAttribute('role', 'option');
      li.setAttribute('aria-selected', String(i === sel));
      li.dataset.name = c.name;
      const name = el('span', 'slash-name', '/' + c.name + (c.argumentHint ? ' ' + c.argumentHint : ''));
      const src = el('span', 'slash-source', c.source === 'prompt' ? 'template' : c.source);
      li.append(name, src, el('span', 'slash-desc', c.description || ''));
      li.addEventListener('mousedown', (e) => { e.preventDefault(); complete(c); });
      list.append(li);
    });
    list.hidden = shown.length === 0;
    if (shown.length) textarea.setAttribute('aria-activedescendant', 'slash-' + sel);
  };

  const update = () => {
    const m = textarea.value.match(/^\s*\/(\S*)$/);
    if (!m) { close(); return; }
    const q = m[1].toLowerCase();
    shown = commands().filter((c) => c.name.toLowerCase().startsWith(q)).slice(0, 50);
    sel = 0;
    render();
  };

  const complete = (c) => {
    textarea.value = '/' + c.name + ' ';
    close();
    textarea.focus();
    textarea.setSelectionRange(textarea.value.length, textarea.value.length);
  };

  textarea.addEventListener('input', update);
  textarea.addEventListener('blur', close);
  // On the form, in the capture phase: these keys belong to the list
  // while it is open, before the message box's own Enter sends.
  textarea.form.addEventListener('keydown', (e) => {
    if (e.target !== textarea || list.hidden || !shown.length) return;
    if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
      sel = (sel + (e.key === 'ArrowDown' ? 1 : shown.length - 1)) % shown.length;
      render();
    } else if (e.key === 'Tab' || (e.key === 'Enter' && !e.shiftKey)) {
      complete(shown[sel]);
    } else if (e.key === 'Escape') {
      close();
    } else {
      return;
    }
    e.preventDefault();
    e.stopImmediatePropagation();
  }, true);
  return { update, close };
}
