// The changes view: what each turn did to the files (the conversation's
// checkpoints, GET .../changes and .../changes/diff), with a revert per
// turn and an undo of the last revert. Text from files reaches the page
// only through textContent.
import { el } from './md.js';

// changesView wires the view to the page: api and convPath call the API,
// note and banner tell the person, state() is the page's {convId, open},
// fillPrompt puts a reverted turn's message back in the message box.
export function changesView({ api, convPath, note, banner, state, fillPrompt }) {
  // refresh puts a "Changes" box under every user message whose turn
  // changed files, and the undo bar when a revert can be undone.
  async function refresh(my) {
    const id = state().convId;
    const bar = document.getElementById('undo-bar');
    if (!id) { bar.hidden = true; return; }
    let ch;
    try {
      ch = await api('GET', convPath(id) + '/changes');
    } catch {
      return; // checkpoints off, or the conversation went away: nothing to show
    }
    if (my !== state().open || id !== state().convId) return;
    for (const x of document.querySelectorAll('#messages .turn-changes')) x.remove();
    for (const t of ch.turns) {
      if (t.message_index < 0) continue;
      const msg = document.querySelector(`#messages .msg-user[data-index="${t.message_index}"]`);
      if (msg) msg.append(turnBox(id, t));
    }
    showUndo(id, ch.undo);
  }

  function turnBox(id, t) {
    const det = el('details', 'turn-changes');
    det.dataset.turn = t.id;
    det.append(el('summary', '', 'Changes'));
    const body = el('div', 'changes-body');
    det.append(body);
    det.addEventListener('toggle', async () => {
      if (!det.open || det.dataset.loaded) return;
      det.dataset.loaded = '1';
      body.replaceChildren(el('p', 'note', 'Loading the changes…'));
      try {
        const d = await api('GET', convPath(id) + '/changes/diff?turn=' + encodeURIComponent(t.id));
        body.replaceChildren(...files(d), actions(id, t));
      } catch (e) {
        body.replaceChildren(el('p', 'error', e.message));
        delete det.dataset.loaded;
      }
    });
    return det;
  }

  function files(d) {
    const out = [];
    if (!d.files.length) out.push(el('p', 'note', 'No file differs from before this turn any more.'));
    if (d.live) out.push(el('p', 'note', 'The turn has not ended: these are its changes so far.'));
    for (const f of d.files) {
      const box = el('div', 'changed-file');
      const head = el('div', 'changed-head');
      head.append(el('span', 'file-status file-' + f.status, f.status), el('span', 'path', ' ' + f.path),
        el('span', 'counts', ` +${f.additions} −${f.deletions}`));
      box.append(head);
      if (f.binary) {
        box.append(el('p', 'note', 'Binary file: no text to show.'));
      } else {
        const pre = el('pre', 'diff');
        for (const h of f.hunks) {
          pre.append(el('span', 'hunk', h.header + '\n'));
          for (const l of h.lines) {
            const cls = l[0] === '+' ? 'add' : l[0] === '-' ? 'del' : 'ctx';
            pre.append(el('span', cls, l + '\n'));
          }
        }
        box.append(pre);
      }
      out.push(box);
    }
    if (d.skipped && d.skipped.length) {
      const s = el('details', 'skipped');
      s.append(el('summary', '', `${d.skipped.length} path(s) not recorded`));
      for (const k of d.skipped) s.append(el('div', 'path', `${k.path}: ${k.reason}`));
      out.push(s);
    }
    return out;
  }

  function actions(id, t) {
    const row = el('div', 'row changes-actions');
    const files = el('button', '', 'Revert files');
    files.type = 'button';
    files.dataset.action = 'revert';
    files.title = 'Put the files back as they were before this turn; the conversation stays';
    const both = el('button', 'danger', 'Revert files and conversation');
    both.type = 'button';
    both.dataset.action = 'revert-truncate';
    both.title = 'Put the files back and go back to just before this message';
    files.addEventListener('click', () => revert(id, t, false, row));
    both.addEventListener('click', () => revert(id, t, true, row));
    row.append(files, both, el('span', 'note', 'A revert can be undone.'));
    return row;
  }

  async function revert(id, t, truncate, row) {
    for (const b of row.querySelectorAll('button')) b.disabled = true;
    try {
      const r = await api('POST', convPath(id) + '/changes/revert', { turn: t.id, truncate });
      const n = r.written.length + r.deleted.length;
      let text = `Reverted ${n} file(s) to before “${t.prompt}”.`;
      if (r.kept.length) text += ` Left as they are: ${r.kept.map((k) => k.path + ' (' + k.reason + ')').join(', ')}.`;
      if (id === state().convId) {
        note(text);
        if (r.truncated && r.prompt) fillPrompt(r.prompt);
      }
    } catch (e) {
      banner(e.message);
      for (const b of row.querySelectorAll('button')) b.disabled = false;
    }
    refresh(state().open);
  }

  function showUndo(id, undo) {
    const bar = document.getElementById('undo-bar');
    if (!undo) { bar.hidden = true; bar.replaceChildren(); return; }
    const b = el('button', 'primary', 'Undo revert');
    b.type = 'button';
    b.dataset.action = 'undo-revert';
    b.addEventListener('click', async () => {
      b.disabled = true;
      try {
        await api('POST', convPath(id) + '/changes/undo');
        if (id === state().convId) note('The revert was undone: the files are as the turn left them.');
      } catch (e) {
        banner(e.message);
      }
      refresh(state().open);
    });
    bar.replaceChildren(el('span', '', undo.truncated ? 'Files and conversation were reverted.' : 'Files were reverted.'), b);
    bar.hidden = false;
  }

  return { refresh };
}
