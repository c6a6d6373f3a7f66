package memory

// The bounds the external tests check the store against.
const (
	CapacityRetryAfter = capacityRetryAfter
	MinSketchBytes     = minSketchBytes
	MinSketchPoolBytes = minSketchPoolBytes
)

var (
	ErrInvalidConfig = errInvalidConfig
	MaxLogBytes      = maxLogBytes
)
