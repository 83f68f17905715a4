package recovery

// What the package's external tests reach that no other package uses.
var (
	DefaultRetryPolicy = defaultRetryPolicy
	HashInput          = hashInput
)
