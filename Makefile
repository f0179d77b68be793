EXTENSION = outbox
EXTVERSION = 0.7.0

MODULE_big = outbox
# every module of src/ and its rooms (src/README.md), and the envelope's
# generated code
OBJS = $(patsubst %.c,%.o,$(filter-out %.pb-c.c,$(wildcard src/*.c src/*/*.c))) src/kafka/outbox.pb-c.o

# sql/outbox.sql is the one install script: the versioned one is generated
# from it (below), a release writes only its upgrade script by hand.
# sql/frozen/ holds earlier versions' full install scripts as released,
# never edited: what t/040_upgrade.pl installs to update from.
DATA = $(wildcard sql/$(EXTENSION)--*--*.sql) $(wildcard sql/frozen/$(EXTENSION)--*.sql)
DATA_built = sql/$(EXTENSION)--$(EXTVERSION).sql
DOCS = README.md

# pg_regress's inputs are in test/ (sql/ holds what is installed)
REGRESS = send bad_input dead_letter privileges status conventions capture reserved_prefix altered_table debezium
REGRESS_OPTS = --inputdir=test --temp-instance=tmp_check_regress --temp-config=test/regress.conf
# `make installcheck` is pg_regress only, as packagers' tools expect
# (pg_buildext installcheck); the TAP tests need the project's broker and
# kcat and run with `make prove_installcheck` (scripts/test.sh runs both).

# The project's scripts (tests, CI, demo, benchmark) build with WERROR=1;
# a user's `make` does not fail on a warning a newer compiler invents.
PG_CPPFLAGS = -Isrc -DOUTBOX_VERSION=\"$(EXTVERSION)\" -Wall -Wextra $(if $(WERROR),-Werror) \
              -Wno-unused-parameter -Wno-missing-field-initializers
SHLIB_LINK = -lrdkafka -lprotobuf-c

EXTRA_CLEAN = sql/$(EXTENSION)--$(EXTVERSION).sql src/kafka/outbox.pb-c.c src/kafka/outbox.pb-c.h tools/outbox-broker tmp_check_regress tmp_check

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# PGXS's own recipe (PROVE_TESTS, PROVE_FLAGS), without TAP_TESTS.
.PHONY: prove_installcheck
prove_installcheck:
	$(prove_installcheck)

# The PGXN release: the committed tree under outbox-VERSION/.
.PHONY: dist
dist:
	git archive --format zip --prefix=$(EXTENSION)-$(EXTVERSION)/ -o $(EXTENSION)-$(EXTVERSION).zip HEAD

sql/$(EXTENSION)--$(EXTVERSION).sql: sql/$(EXTENSION).sql
	cp $< $@

# The envelope's C code is generated from proto/outbox.proto, never committed.
src/kafka/outbox.pb-c.c src/kafka/outbox.pb-c.h: proto/outbox.proto
	protoc-c --proto_path=proto --c_out=src/kafka $<

# PGXS tracks no header dependencies
$(OBJS): $(wildcard src/*.h src/*/*.h)
src/kafka/envelope.o: src/kafka/outbox.pb-c.h
# OUTBOX_VERSION comes from EXTVERSION here
src/table/step.o: Makefile

# protoc-c's initializer macros trip -Wmissing-braces; that is its style, not a bug
src/kafka/envelope.o src/kafka/outbox.pb-c.o: override CPPFLAGS += -Wno-missing-braces

# The Kafka-protocol broker the tests and the demo run against, built by
# their scripts (`make tools/outbox-broker`), not by a user's `make`.
tools/outbox-broker: tools/outbox_broker.c
	$(CC) -O2 -Wall -Wextra -Werror -o $@ $< -lrdkafka -lpthread
