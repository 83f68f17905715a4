package streams

// What the package's external tests reach that no other package uses.
var ReservedJobIDs = reservedJobIDs
