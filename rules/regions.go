package rules

// regionsWord is the keyword of the regions: statement.
const regionsWord = "regions"

// regionsLocal is the only value of the regions: statement.
const regionsLocal = "local"

// regions parses a regions: statement. Its only value is local: a group
// without the statement is shared by every region, so regions:global
// would say nothing and is refused like any other word.
func (p *parser) regions(start int) *Error {
	if p.seenRegions {
		return invalidErr(p.s, start, "duplicate regions statement")
	}
	p.seenRegions = true
	word, at, err := p.keyword(regionsWord, "region scope")
	if err != nil {
		return err
	}
	switch word {
	case regionsLocal:
		p.g.Regional = true
	case "global":
		return syntaxErr(p.s, at, "region scope %q is the default and is not written; want local", word)
	default:
		return syntaxErr(p.s, at, "unknown region scope %q; want local", word)
	}
	p.pos["Regional"] = at
	return nil
}
