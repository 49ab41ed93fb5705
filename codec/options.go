package codec

import (
	"fmt"
	"runtime"
)

// Option configures an Encoder or a decode.
type Option func(*options) error

type options struct {
	workers int
}

func defaultOptions() options { return options{workers: runtime.GOMAXPROCS(0)} }

// WithWorkers sets how many goroutines encode or decode chunks of one
// tensor at once. n must be at least 1.
func WithWorkers(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("codec: workers must be at least 1, got %d", n)
		}
		o.workers = n
		return nil
	}
}

func buildOptions(opts []Option) (options, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	return o, nil
}
