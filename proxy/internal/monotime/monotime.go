package monotime

import "time"

// Now starts at 1<<62, so that 0 (never, or reset) is always long ago.
func Now() int64 { return int64(time.Since(epoch)) + 1<<62 }

var epoch = time.Now()
