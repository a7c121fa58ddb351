//go:build tools

// Package tools pins the franz-go module whose own kgo test suite run.sh
// executes; nothing here is built.
package tools

import (
	_ "github.com/twmb/franz-go/pkg/kgo"
)
