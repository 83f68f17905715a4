package recovery

// DefaultRetryPolicy is what the package's external tests reach that no
// other package uses.
var DefaultRetryPolicy = defaultRetryPolicy
