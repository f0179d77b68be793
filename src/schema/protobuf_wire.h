/*
 * protobuf_wire.h
 *		Whether bytes are a well-formed Protobuf message on the wire, for a
 *		Protobuf payload the sender encoded: no descriptor is read, so the
 *		fields' numbers and types are not checked.
 */
#ifndef OUTBOX_SCHEMA_PROTOBUF_WIRE_H
#define OUTBOX_SCHEMA_PROTOBUF_WIRE_H

#include "postgres.h"

/*
 * NULL if data is a sequence of well-formed fields (a tag with a field
 * number from 1 to 2^29-1 and wire type 0, 1, 2 or 5, a varint of at most
 * 10 bytes, a length within the bytes left; groups, wire types 3 and 4, are
 * refused), else what is wrong and at which byte (palloc'd).
 */
extern char *outbox_protobuf_wire_fault(const uint8 *data, size_t len);

#endif							/* OUTBOX_SCHEMA_PROTOBUF_WIRE_H */
