package contractreview

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

var clauseTemplates = []string{
	"The Supplier shall indemnify the Customer against all losses arising from any breach of this Agreement, save where such losses result from the Customer's own negligence.",
	"Either party may terminate this Agreement on %d days' written notice if the other party commits a material breach that remains unremedied.",
	"The Customer shall pay each undisputed invoice within %d days of receipt; late payments bear interest at 4%% above the base rate.",
	"Each party shall keep confidential all information disclosed by the other and use it only to perform its obligations under this Agreement.",
	"The Supplier shall process personal data only on documented instructions and shall notify the Customer of any personal data breach within %d hours.",
	"All intellectual property rights in the Deliverables vest in the Customer upon payment in full.",
	"The Supplier warrants that the Services will be performed with reasonable skill and care and in accordance with good industry practice.",
	"Any dispute shall first be referred to senior management and, failing resolution within %d days, to arbitration in London.",
	"Neither party's aggregate liability shall exceed %d%% of the fees paid in the twelve months preceding the claim.",
	"Neither party shall be liable for delay caused by events beyond its reasonable control, provided it notifies the other without undue delay.",
	"Neither party may assign or subcontract its rights under this Agreement without the other's prior written consent, not to be unreasonably withheld.",
	"The Supplier shall comply with all applicable anti-bribery, sanctions and export control laws.",
}

// Contract generates a plausible contract of n clauses, each under its own
// numbered heading, deterministic for seed.
func Contract(n int, seed int64) string {
	r := rand.New(rand.NewPCG(uint64(seed), 0x5a17a9e))
	var b strings.Builder
	b.WriteString("MASTER SERVICES AGREEMENT\n\n")
	for i := range n {
		t := clauseTemplates[r.IntN(len(clauseTemplates))]
		if strings.Contains(t, "%d") {
			t = fmt.Sprintf(t, 5+r.IntN(90))
		}
		fmt.Fprintf(&b, "Clause %d\n\n%s\n\n", i+1, t)
	}
	return b.String()
}
