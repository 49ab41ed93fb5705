package main

import (
	"io"
	"strings"

	"github.com/rivo/uniseg"
)

// columns lays rows of cells out two spaces apart, each column as wide as
// its widest cell as a terminal shows it. text/tabwriter counts runes, so
// a tensor name in wide (CJK) or combining characters pushed every column
// after it out of line.
type columns struct{ rows [][]string }

// add appends a row.
func (c *columns) add(cells ...string) { c.rows = append(c.rows, cells) }

// write prints the rows, without spaces at the end of a line.
func (c *columns) write(w io.Writer) error {
	var widths []int
	for _, r := range c.rows {
		for i, s := range r {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], uniseg.StringWidth(s))
		}
	}
	var b, line strings.Builder
	for _, r := range c.rows {
		line.Reset()
		for i, s := range r {
			line.WriteString(s)
			if i < len(r)-1 {
				line.WriteString(strings.Repeat(" ", widths[i]-uniseg.StringWidth(s)+2))
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}
