package gpu_test

import (
	"strings"
	"time"
)

var testTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func contains(s, sub string) bool { return strings.Contains(s, sub) }
