/*
 * protobuf_wire.c
 *		A walk over Protobuf's wire format: tags, varints, fixed fields and
 *		lengths. What it proves is that a consumer's parser can step through
 *		the message; that the fields are the schema's needs the descriptor,
 *		which the send path does not have.
 */
#include "schema/protobuf_wire.h"

/* a varint at *pos, or false if it runs past the end or over 10 bytes */
static bool
read_varint(const uint8 *data, size_t len, size_t *pos, uint64 *value)
{
	uint64		result = 0;

	for (int shift = 0; shift < 70; shift += 7)
	{
		uint8		byte;

		if (*pos >= len)
			return false;
		byte = data[(*pos)++];
		result |= (uint64) (byte & 0x7f) << shift;
		if ((byte & 0x80) == 0)
		{
			*value = result;
			return true;
		}
	}
	return false;
}

char *
outbox_protobuf_wire_fault(const uint8 *data, size_t len)
{
	size_t		pos = 0;

	while (pos < len)
	{
		size_t		start = pos;
		uint64		tag;
		uint64		length;
		uint64		value;

		if (!read_varint(data, len, &pos, &tag) || tag > PG_UINT32_MAX)
			return psprintf("the tag at byte %zu is not a varint of 32 bits", start);
		if ((tag >> 3) == 0)
			return psprintf("the field at byte %zu has number 0", start);
		switch (tag & 7)
		{
			case 0:
				if (!read_varint(data, len, &pos, &value))
					return psprintf("the varint of field %u at byte %zu runs past the end or over 10 bytes",
									(uint32) (tag >> 3), start);
				break;
			case 1:
			case 5:
				length = (tag & 7) == 1 ? 8 : 4;
				if (len - pos < length)
					return psprintf("the fixed%d field %u at byte %zu runs past the end",
									(int) length * 8, (uint32) (tag >> 3), start);
				pos += length;
				break;
			case 2:
				if (!read_varint(data, len, &pos, &length))
					return psprintf("the length of field %u at byte %zu runs past the end",
									(uint32) (tag >> 3), start);
				if (length > len - pos)
					return psprintf("field %u at byte %zu is %llu bytes long, %zu are left",
									(uint32) (tag >> 3), start, (unsigned long long) length,
									len - pos);
				pos += length;
				break;
			default:
				return psprintf("field %u at byte %zu has wire type %d%s",
								(uint32) (tag >> 3), start, (int) (tag & 7),
								(tag & 7) == 3 || (tag & 7) == 4 ? " (a group, which is not checked)" : ", which does not exist");
		}
	}
	return NULL;
}
