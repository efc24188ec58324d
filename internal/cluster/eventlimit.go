package cluster

import "encoding/binary"

// MaxEventBytes is the largest event (its encoded Data) the event stream
// takes: what one message may carry (the NATS server's max_payload, at
// most MaxStateMsg), less room for headers and a batch's framing. A
// larger one would be refused (or time out) on every attempt, and every
// later event of its session would wait behind it for good.
func (n *Node) MaxEventBytes() int { return n.batchBytes() - 2*binary.MaxVarintLen64 }
