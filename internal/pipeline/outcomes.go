package pipeline

import "time"

// outcome is the stored answer of an identified command, filed by its id,
// its idempotency key, or both.
type outcome struct {
	fp   string
	resp Response
	// id and key are where the outcome is filed; "" once it is not (or
	// never was). Each has its own expiry: ids are kept for the outcome
	// retention, keys for the idempotency TTL.
	id, key               string
	idExpires, keyExpires time.Time
	gone                  bool // filed nowhere any more
	// journaled is set on an outcome read from a journal, whose
	// fingerprint may be unkeyed (see Pipeline.answers).
	journaled bool
}

// outcomes keeps the answers of identified commands for replay, within a
// count and a budget for their data. Past the count the oldest outcomes
// are forgotten (pi-server keeps 2000 by id); past the budget the oldest
// lose their data but keep their identity, fingerprint and success, so a
// retry is still recognised and never runs a command a second time.
// Guarded by Pipeline.mu.
type outcomes struct {
	max, maxBytes int
	ids, keys     map[string]*outcome
	order         []*outcome // oldest first; may hold gone outcomes
	head          int        // order[:head] were evicted
	data          int        // order[head:data] hold no data
	live          int        // outcomes not gone
	bytes         int        // data held by live outcomes
}

func newOutcomes(max, maxBytes int) *outcomes {
	return &outcomes{max: max, maxBytes: maxBytes, ids: map[string]*outcome{}, keys: map[string]*outcome{}}
}

func (s *outcomes) byID(id string, now time.Time) *outcome {
	if o := s.ids[id]; o != nil && o.idExpires.After(now) {
		return o
	}
	return nil
}

func (s *outcomes) byKey(k string, now time.Time) *outcome {
	if o := s.keys[k]; o != nil && o.keyExpires.After(now) {
		return o
	}
	return nil
}

// put files o (o.id and o.key say where) and trims to the bounds.
func (s *outcomes) put(o *outcome) {
	if o.id != "" {
		if old := s.ids[o.id]; old != nil {
			old.id = ""
			s.release(old)
		}
		s.ids[o.id] = o
	}
	if o.key != "" {
		if old := s.keys[o.key]; old != nil {
			old.key = ""
			s.release(old)
		}
		s.keys[o.key] = o
	}
	s.order = append(s.order, o)
	s.live++
	s.bytes += len(o.resp.Data)
	for s.live > s.max && s.head < len(s.order) {
		old := s.order[s.head]
		s.order[s.head] = nil
		s.head++
		s.evict(old)
	}
	s.data = max(s.data, s.head)
	for s.bytes > s.maxBytes && s.data < len(s.order) {
		if old := s.order[s.data]; !old.gone && len(old.resp.Data) > 0 {
			s.bytes -= len(old.resp.Data)
			old.resp.Data = nil
			old.resp.DataDropped = true
		}
		s.data++
	}
	if s.head > len(s.order)/2 {
		s.pack()
	}
}

// evict unfiles o.
func (s *outcomes) evict(o *outcome) {
	if o.id != "" && s.ids[o.id] == o {
		delete(s.ids, o.id)
	}
	if o.key != "" && s.keys[o.key] == o {
		delete(s.keys, o.key)
	}
	o.id, o.key = "", ""
	s.release(o)
}

// release forgets o once it is filed nowhere.
func (s *outcomes) release(o *outcome) {
	if o.gone || o.id != "" || o.key != "" {
		return
	}
	o.gone = true
	s.live--
	s.bytes -= len(o.resp.Data)
}

// sweep unfiles what has expired and packs the order.
func (s *outcomes) sweep(now time.Time) {
	for k, o := range s.ids {
		if !o.idExpires.After(now) {
			delete(s.ids, k)
			o.id = ""
			s.release(o)
		}
	}
	for k, o := range s.keys {
		if !o.keyExpires.After(now) {
			delete(s.keys, k)
			o.key = ""
			s.release(o)
		}
	}
	s.pack()
}

// pack drops evicted and gone outcomes from the order.
func (s *outcomes) pack() {
	kept := s.order[:0]
	data := 0
	for i := s.head; i < len(s.order); i++ {
		o := s.order[i]
		if o.gone {
			continue
		}
		if i < s.data {
			data++
		}
		kept = append(kept, o)
	}
	clear(s.order[len(kept):])
	s.order, s.head, s.data = kept, 0, data
}
