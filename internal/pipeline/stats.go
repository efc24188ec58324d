package pipeline

// Stats are the pipeline's stores, for metrics.
type Stats struct {
	// InFlight are admitted commands not yet finished; InFlightByID the
	// ones with an id (what a duplicate waits for).
	InFlight     int
	InFlightByID int
	// Outcomes and IdempotencyKeys are the outcomes kept for replay, by
	// id and by key; OutcomeBytes the answer data they hold;
	// MaxOutcomes the bound on them.
	Outcomes        int
	IdempotencyKeys int
	OutcomeBytes    int
	MaxOutcomes     int
	// Lanes are lanes with queued or running commands; Versions the
	// sessions whose version is tracked.
	Lanes    int
	Versions int
}

// Stats reports the pipeline's stores now.
func (p *Pipeline) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{
		InFlight: p.inFlight, InFlightByID: len(p.byID),
		Outcomes: len(p.out.ids), IdempotencyKeys: len(p.out.keys), OutcomeBytes: p.out.bytes, MaxOutcomes: p.out.max,
		Lanes: len(p.lanes), Versions: len(p.versions),
	}
}
