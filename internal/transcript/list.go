package transcript

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Info summarises a session file for a session picker (pi's SessionInfo).
type Info struct {
	Path          string
	ID            string
	Cwd           string
	Name          string // latest session_info name, "" if unnamed
	ParentSession string
	Created       time.Time // header timestamp
	// Modified is the time of the latest user or assistant message, else
	// the header's time, else the file's mtime, as pi computes it.
	Modified     time.Time
	MessageCount int    // message entries on all branches
	FirstMessage string // text of the first user message with text; "" if none
	// FileID is the identity of the file read, for telling whether it is
	// one a session has open under another path.
	FileID FileID
}

// List summarises the sessions in dir (one cwd's directory, see
// SessionDir), most recently active first. Files that are not session
// files are left out; a missing dir is an empty list.
func List(dir string) ([]Info, error) {
	files, err := sessionFiles(dir)
	if err != nil {
		return nil, err
	}
	return readInfos(files), nil
}

// ListAll summarises the sessions of every cwd under the sessions root,
// most recently active first.
func ListAll(root string) ([]Info, error) {
	dirs, err := os.ReadDir(root)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var files []string
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		found, err := sessionFiles(filepath.Join(root, d.Name()))
		if err != nil {
			continue // an unreadable project directory hides only itself
		}
		files = append(files, found...)
	}
	return readInfos(files), nil
}

// ReadInfo summarises one session file. A path that is not a regular
// file gets ErrNotRegular, without being opened blocking.
func ReadInfo(path string) (Info, error) {
	data, fi, err := readRegular(path, 0)
	if err != nil {
		return Info{}, err
	}
	info, ok := scanInfo(data)
	if !ok {
		return Info{}, ErrNoHeader
	}
	info.Path = path
	if id, err := fileIDOf(fi); err == nil {
		info.FileID = id
	}
	if info.Modified.IsZero() {
		info.Modified = fi.ModTime()
	}
	return info, nil
}

func sessionFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var out []string
	for _, e := range ents {
		// Regular files and symlinks (ReadInfo checks what they point
		// to); a FIFO, socket or device is never opened.
		t := e.Type()
		if (t.IsRegular() || t&fs.ModeSymlink != 0) && strings.HasSuffix(e.Name(), ".jsonl") && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out, nil
}

// readInfos reads files in parallel: listing is dominated by reading and
// scanning bytes, which spreads across cores.
func readInfos(files []string) []Info {
	infos := make([]Info, len(files))
	ok := make([]bool, len(files))
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i, p := range files {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			info, err := ReadInfo(p)
			infos[i], ok[i] = info, err == nil
		}()
	}
	wg.Wait()
	out := infos[:0]
	for i := range infos {
		if ok[i] {
			out = append(out, infos[i])
		}
	}
	slices.SortStableFunc(out, func(a, b Info) int { return b.Modified.Compare(a.Modified) })
	return out
}

// scanInfo reads a session file without decoding its messages: each line
// is walked by a skipping scanner that only materialises the handful of
// values a listing needs, so message bodies cost a pass over their bytes
// and no allocation. ok is false if the first readable line is not a
// session header.
func scanInfo(data []byte) (info Info, ok bool) {
	var lastActivity float64
	haveActivity := false
	first := true
	for len(data) > 0 {
		var line []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			line, data = data, nil
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var typ, id, ts, cwd, parent, name, msg []byte
		err := eachField(line, func(k, v []byte) {
			switch string(k) {
			case "type":
				typ = v
			case "id":
				id = v
			case "timestamp":
				ts = v
			case "cwd":
				cwd = v
			case "parentSession":
				parent = v
			case "name":
				name = v
			case "message":
				msg = v
			}
		})
		if err != nil {
			continue // pi skips lines JSON.parse rejects
		}
		t := token(typ)
		if first {
			first = false
			if string(t) != typeSession {
				return Info{}, false
			}
			info.ID = jsonString(id)
			info.Cwd = jsonString(cwd)
			info.ParentSession = jsonString(parent)
			if tm, ok := parseISO(jsonString(ts)); ok {
				info.Created = tm
			}
			continue
		}
		switch string(t) {
		case string(TypeSessionInfo):
			info.Name = trimSpace(jsonString(name))
		case string(TypeMessage):
			info.MessageCount++
			var role, content, mts []byte
			hasContent := false
			if len(msg) == 0 || msg[0] != '{' {
				continue
			}
			_ = eachField(msg, func(k, v []byte) {
				switch string(k) {
				case "role":
					role = v
				case "content":
					content, hasContent = v, true
				case "timestamp":
					mts = v
				}
			})
			r := token(role)
			user := string(r) == "user"
			if !hasContent || (!user && string(r) != "assistant") {
				continue
			}
			if n, err := strconv.ParseFloat(string(mts), 64); err == nil && len(mts) > 0 && mts[0] != '"' {
				lastActivity, haveActivity = math.Max(lastActivity, n), true
			} else if tm, ok := parseISO(jsonString(ts)); ok {
				lastActivity, haveActivity = math.Max(lastActivity, float64(tm.UnixMilli())), true
			}
			if info.FirstMessage == "" && user {
				info.FirstMessage = contentText(content)
			}
		}
	}
	if first {
		return Info{}, false
	}
	switch {
	case haveActivity && lastActivity > 0:
		info.Modified = time.UnixMilli(int64(lastActivity))
	case !info.Created.IsZero():
		info.Modified = info.Created
	}
	return info, true
}

// contentText is pi's extractTextContent: a string content, or the text
// blocks joined by spaces.
func contentText(v []byte) string {
	if len(v) == 0 {
		return ""
	}
	if v[0] == '"' {
		return jsonString(v)
	}
	if v[0] != '[' {
		return ""
	}
	var parts []string
	_ = eachElement(v, func(el []byte) {
		var typ, text []byte
		if len(el) == 0 || el[0] != '{' {
			return
		}
		_ = eachField(el, func(k, v []byte) {
			switch string(k) {
			case "type":
				typ = v
			case "text":
				text = v
			}
		})
		if string(token(typ)) == "text" {
			parts = append(parts, jsonString(text))
		}
	})
	return strings.Join(parts, " ")
}

// token returns the bytes of a short JSON string value such as a type or
// role, for comparing without allocating; escapes (never seen in
// practice) are decoded.
func token(v []byte) []byte {
	if len(v) < 2 || v[0] != '"' {
		return nil
	}
	inner := v[1 : len(v)-1]
	if bytes.IndexByte(inner, '\\') >= 0 {
		return []byte(jsonString(v))
	}
	return inner
}

// jsonString decodes a raw JSON string value; "" for anything else.
func jsonString(v []byte) string {
	if len(v) < 2 || v[0] != '"' {
		return ""
	}
	inner := v[1 : len(v)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return string(inner)
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return ""
	}
	return s
}

var errSyntax = errors.New("transcript: malformed JSON")

// eachField calls fn with the raw key (without quotes, escapes left as
// they are) and raw value of every member of the object obj. It checks
// structure, not every detail of the grammar: it is for listing, where a
// line that slips through only miscounts, never corrupts.
func eachField(obj []byte, fn func(key, val []byte)) error {
	i := skipWS(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return errSyntax
	}
	i = skipWS(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return trailing(obj, i+1)
	}
	for {
		if i >= len(obj) || obj[i] != '"' {
			return errSyntax
		}
		kend, err := skipString(obj, i)
		if err != nil {
			return err
		}
		key := obj[i+1 : kend-1]
		i = skipWS(obj, kend)
		if i >= len(obj) || obj[i] != ':' {
			return errSyntax
		}
		i = skipWS(obj, i+1)
		vend, err := skipValue(obj, i)
		if err != nil {
			return err
		}
		fn(key, obj[i:vend])
		i = skipWS(obj, vend)
		if i >= len(obj) {
			return errSyntax
		}
		if obj[i] == '}' {
			return trailing(obj, i+1)
		}
		if obj[i] != ',' {
			return errSyntax
		}
		i = skipWS(obj, i+1)
	}
}

// eachElement calls fn with every raw element of the array arr.
func eachElement(arr []byte, fn func(val []byte)) error {
	i := skipWS(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return errSyntax
	}
	i = skipWS(arr, i+1)
	if i < len(arr) && arr[i] == ']' {
		return nil
	}
	for {
		end, err := skipValue(arr, i)
		if err != nil {
			return err
		}
		fn(arr[i:end])
		i = skipWS(arr, end)
		if i >= len(arr) {
			return errSyntax
		}
		if arr[i] == ']' {
			return nil
		}
		if arr[i] != ',' {
			return errSyntax
		}
		i = skipWS(arr, i+1)
	}
}

func trailing(b []byte, i int) error {
	if skipWS(b, i) != len(b) {
		return errSyntax
	}
	return nil
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the index just past the value starting at b[i].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errSyntax
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		return skipNested(b, i)
	}
	j := i
	for j < len(b) {
		c := b[j]
		if c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			break
		}
		if c == '"' || c == '{' || c == '[' || c == ':' {
			return 0, errSyntax
		}
		j++
	}
	if j == i {
		return 0, errSyntax
	}
	return j, nil
}

// skipString returns the index just past the string starting at b[i]. It
// jumps from quote to quote, so long tool outputs cost a memchr.
func skipString(b []byte, i int) (int, error) {
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return 0, errSyntax
		}
		j += k
		bs := 0
		for p := j - 1; p > i && b[p] == '\\'; p-- {
			bs++
		}
		j++
		if bs%2 == 0 {
			return j, nil
		}
	}
}

// skipNested returns the index just past the object or array at b[i],
// tracking only nesting depth and strings.
func skipNested(b []byte, i int) (int, error) {
	depth := 0
	for j := i; j < len(b); j++ {
		switch b[j] {
		case '"':
			end, err := skipString(b, j)
			if err != nil {
				return 0, err
			}
			j = end - 1
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return j + 1, nil
			}
		}
	}
	return 0, errSyntax
}
