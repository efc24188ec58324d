package pirpc

import (
	"testing"

	"go.uber.org/goleak"
)

// The reader, the writer and the commands run off the read loop must all
// be gone once Run returns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
