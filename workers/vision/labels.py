"""ImageNet-1k class names (index order of every ImageNet-1k classifier) and plain words for them.

The names are each class's first WordNet synonym, as torchvision lists them. `plain(index)` turns one into a short
phrase a text model can use ("a cup of coffee (espresso)", "a dog (golden retriever)"); `group(index)` names what
several classes share ("dog", "motorbike", "cup"), so a classifier's probability split over sister classes
(moped 0.5, motor scooter 0.3) can be added up before deciding whether it is sure.
"""

from __future__ import annotations

IMAGENET_CLASSES: tuple[str, ...] = (
    'tench', 'goldfish', 'great white shark', 'tiger shark', 'hammerhead', 'electric ray', 'stingray', 'cock',
    'hen', 'ostrich', 'brambling', 'goldfinch', 'house finch', 'junco', 'indigo bunting', 'robin', 'bulbul', 'jay',
    'magpie', 'chickadee', 'water ouzel', 'kite', 'bald eagle', 'vulture', 'great grey owl',
    'European fire salamander', 'common newt', 'eft', 'spotted salamander', 'axolotl', 'bullfrog', 'tree frog',
    'tailed frog', 'loggerhead', 'leatherback turtle', 'mud turtle', 'terrapin', 'box turtle', 'banded gecko',
    'common iguana', 'American chameleon', 'whiptail', 'agama', 'frilled lizard', 'alligator lizard',
    'Gila monster', 'green lizard', 'African chameleon', 'Komodo dragon', 'African crocodile', 'American alligator',
    'triceratops', 'thunder snake', 'ringneck snake', 'hognose snake', 'green snake', 'king snake', 'garter snake',
    'water snake', 'vine snake', 'night snake', 'boa constrictor', 'rock python', 'Indian cobra', 'green mamba',
    'sea snake', 'horned viper', 'diamondback', 'sidewinder', 'trilobite', 'harvestman', 'scorpion',
    'black and gold garden spider', 'barn spider', 'garden spider', 'black widow', 'tarantula', 'wolf spider',
    'tick', 'centipede', 'black grouse', 'ptarmigan', 'ruffed grouse', 'prairie chicken', 'peacock', 'quail',
    'partridge', 'African grey', 'macaw', 'sulphur-crested cockatoo', 'lorikeet', 'coucal', 'bee eater', 'hornbill',
    'hummingbird', 'jacamar', 'toucan', 'drake', 'red-breasted merganser', 'goose', 'black swan', 'tusker',
    'echidna', 'platypus', 'wallaby', 'koala', 'wombat', 'jellyfish', 'sea anemone', 'brain coral', 'flatworm',
    'nematode', 'conch', 'snail', 'slug', 'sea slug', 'chiton', 'chambered nautilus', 'Dungeness crab', 'rock crab',
    'fiddler crab', 'king crab', 'American lobster', 'spiny lobster', 'crayfish', 'hermit crab', 'isopod',
    'white stork', 'black stork', 'spoonbill', 'flamingo', 'little blue heron', 'American egret', 'bittern',
    'crane bird', 'limpkin', 'European gallinule', 'American coot', 'bustard', 'ruddy turnstone',
    'red-backed sandpiper', 'redshank', 'dowitcher', 'oystercatcher', 'pelican', 'king penguin', 'albatross',
    'grey whale', 'killer whale', 'dugong', 'sea lion', 'Chihuahua', 'Japanese spaniel', 'Maltese dog', 'Pekinese',
    'Shih-Tzu', 'Blenheim spaniel', 'papillon', 'toy terrier', 'Rhodesian ridgeback', 'Afghan hound', 'basset',
    'beagle', 'bloodhound', 'bluetick', 'black-and-tan coonhound', 'Walker hound', 'English foxhound', 'redbone',
    'borzoi', 'Irish wolfhound', 'Italian greyhound', 'whippet', 'Ibizan hound', 'Norwegian elkhound', 'otterhound',
    'Saluki', 'Scottish deerhound', 'Weimaraner', 'Staffordshire bullterrier', 'American Staffordshire terrier',
    'Bedlington terrier', 'Border terrier', 'Kerry blue terrier', 'Irish terrier', 'Norfolk terrier',
    'Norwich terrier', 'Yorkshire terrier', 'wire-haired fox terrier', 'Lakeland terrier', 'Sealyham terrier',
    'Airedale', 'cairn', 'Australian terrier', 'Dandie Dinmont', 'Boston bull', 'miniature schnauzer',
    'giant schnauzer', 'standard schnauzer', 'Scotch terrier', 'Tibetan terrier', 'silky terrier',
    'soft-coated wheaten terrier', 'West Highland white terrier', 'Lhasa', 'flat-coated retriever',
    'curly-coated retriever', 'golden retriever', 'Labrador retriever', 'Chesapeake Bay retriever',
    'German short-haired pointer', 'vizsla', 'English setter', 'Irish setter', 'Gordon setter', 'Brittany spaniel',
    'clumber', 'English springer', 'Welsh springer spaniel', 'cocker spaniel', 'Sussex spaniel',
    'Irish water spaniel', 'kuvasz', 'schipperke', 'groenendael', 'malinois', 'briard', 'kelpie', 'komondor',
    'Old English sheepdog', 'Shetland sheepdog', 'collie', 'Border collie', 'Bouvier des Flandres', 'Rottweiler',
    'German shepherd', 'Doberman', 'miniature pinscher', 'Greater Swiss Mountain dog', 'Bernese mountain dog',
    'Appenzeller', 'EntleBucher', 'boxer', 'bull mastiff', 'Tibetan mastiff', 'French bulldog', 'Great Dane',
    'Saint Bernard', 'Eskimo dog', 'malamute', 'Siberian husky', 'dalmatian', 'affenpinscher', 'basenji', 'pug',
    'Leonberg', 'Newfoundland', 'Great Pyrenees', 'Samoyed', 'Pomeranian', 'chow', 'keeshond', 'Brabancon griffon',
    'Pembroke', 'Cardigan', 'toy poodle', 'miniature poodle', 'standard poodle', 'Mexican hairless', 'timber wolf',
    'white wolf', 'red wolf', 'coyote', 'dingo', 'dhole', 'African hunting dog', 'hyena', 'red fox', 'kit fox',
    'Arctic fox', 'grey fox', 'tabby', 'tiger cat', 'Persian cat', 'Siamese cat', 'Egyptian cat', 'cougar', 'lynx',
    'leopard', 'snow leopard', 'jaguar', 'lion', 'tiger', 'cheetah', 'brown bear', 'American black bear',
    'ice bear', 'sloth bear', 'mongoose', 'meerkat', 'tiger beetle', 'ladybug', 'ground beetle',
    'long-horned beetle', 'leaf beetle', 'dung beetle', 'rhinoceros beetle', 'weevil', 'fly', 'bee', 'ant',
    'grasshopper', 'cricket', 'walking stick', 'cockroach', 'mantis', 'cicada', 'leafhopper', 'lacewing',
    'dragonfly', 'damselfly', 'admiral', 'ringlet', 'monarch', 'cabbage butterfly', 'sulphur butterfly', 'lycaenid',
    'starfish', 'sea urchin', 'sea cucumber', 'wood rabbit', 'hare', 'Angora', 'hamster', 'porcupine',
    'fox squirrel', 'marmot', 'beaver', 'guinea pig', 'sorrel', 'zebra', 'hog', 'wild boar', 'warthog',
    'hippopotamus', 'ox', 'water buffalo', 'bison', 'ram', 'bighorn', 'ibex', 'hartebeest', 'impala', 'gazelle',
    'Arabian camel', 'llama', 'weasel', 'mink', 'polecat', 'black-footed ferret', 'otter', 'skunk', 'badger',
    'armadillo', 'three-toed sloth', 'orangutan', 'gorilla', 'chimpanzee', 'gibbon', 'siamang', 'guenon', 'patas',
    'baboon', 'macaque', 'langur', 'colobus', 'proboscis monkey', 'marmoset', 'capuchin', 'howler monkey', 'titi',
    'spider monkey', 'squirrel monkey', 'Madagascar cat', 'indri', 'Indian elephant', 'African elephant',
    'lesser panda', 'giant panda', 'barracouta', 'eel', 'coho', 'rock beauty', 'anemone fish', 'sturgeon', 'gar',
    'lionfish', 'puffer', 'abacus', 'abaya', 'academic gown', 'accordion', 'acoustic guitar', 'aircraft carrier',
    'airliner', 'airship', 'altar', 'ambulance', 'amphibian', 'analog clock', 'apiary', 'apron', 'ashcan',
    'assault rifle', 'backpack', 'bakery', 'balance beam', 'balloon', 'ballpoint', 'Band Aid', 'banjo', 'bannister',
    'barbell', 'barber chair', 'barbershop', 'barn', 'barometer', 'barrel', 'barrow', 'baseball', 'basketball',
    'bassinet', 'bassoon', 'bathing cap', 'bath towel', 'bathtub', 'beach wagon', 'beacon', 'beaker', 'bearskin',
    'beer bottle', 'beer glass', 'bell cote', 'bib', 'bicycle-built-for-two', 'bikini', 'binder', 'binoculars',
    'birdhouse', 'boathouse', 'bobsled', 'bolo tie', 'bonnet', 'bookcase', 'bookshop', 'bottlecap', 'bow',
    'bow tie', 'brass', 'brassiere', 'breakwater', 'breastplate', 'broom', 'bucket', 'buckle', 'bulletproof vest',
    'bullet train', 'butcher shop', 'cab', 'caldron', 'candle', 'cannon', 'canoe', 'can opener', 'cardigan',
    'car mirror', 'carousel', "carpenter's kit", 'carton', 'car wheel', 'cash machine', 'cassette',
    'cassette player', 'castle', 'catamaran', 'CD player', 'cello', 'cellular telephone', 'chain',
    'chainlink fence', 'chain mail', 'chain saw', 'chest', 'chiffonier', 'chime', 'china cabinet',
    'Christmas stocking', 'church', 'cinema', 'cleaver', 'cliff dwelling', 'cloak', 'clog', 'cocktail shaker',
    'coffee mug', 'coffeepot', 'coil', 'combination lock', 'computer keyboard', 'confectionery', 'container ship',
    'convertible', 'corkscrew', 'cornet', 'cowboy boot', 'cowboy hat', 'cradle', 'crane', 'crash helmet', 'crate',
    'crib', 'Crock Pot', 'croquet ball', 'crutch', 'cuirass', 'dam', 'desk', 'desktop computer', 'dial telephone',
    'diaper', 'digital clock', 'digital watch', 'dining table', 'dishrag', 'dishwasher', 'disk brake', 'dock',
    'dogsled', 'dome', 'doormat', 'drilling platform', 'drum', 'drumstick', 'dumbbell', 'Dutch oven',
    'electric fan', 'electric guitar', 'electric locomotive', 'entertainment center', 'envelope', 'espresso maker',
    'face powder', 'feather boa', 'file', 'fireboat', 'fire engine', 'fire screen', 'flagpole', 'flute',
    'folding chair', 'football helmet', 'forklift', 'fountain', 'fountain pen', 'four-poster', 'freight car',
    'French horn', 'frying pan', 'fur coat', 'garbage truck', 'gasmask', 'gas pump', 'goblet', 'go-kart',
    'golf ball', 'golfcart', 'gondola', 'gong', 'gown', 'grand piano', 'greenhouse', 'grille', 'grocery store',
    'guillotine', 'hair slide', 'hair spray', 'half track', 'hammer', 'hamper', 'hand blower', 'hand-held computer',
    'handkerchief', 'hard disc', 'harmonica', 'harp', 'harvester', 'hatchet', 'holster', 'home theater',
    'honeycomb', 'hook', 'hoopskirt', 'horizontal bar', 'horse cart', 'hourglass', 'iPod', 'iron',
    "jack-o'-lantern", 'jean', 'jeep', 'jersey', 'jigsaw puzzle', 'jinrikisha', 'joystick', 'kimono', 'knee pad',
    'knot', 'lab coat', 'ladle', 'lampshade', 'laptop', 'lawn mower', 'lens cap', 'letter opener', 'library',
    'lifeboat', 'lighter', 'limousine', 'liner', 'lipstick', 'Loafer', 'lotion', 'loudspeaker', 'loupe',
    'lumbermill', 'magnetic compass', 'mailbag', 'mailbox', 'maillot', 'maillot tank suit', 'manhole cover',
    'maraca', 'marimba', 'mask', 'matchstick', 'maypole', 'maze', 'measuring cup', 'medicine chest', 'megalith',
    'microphone', 'microwave', 'military uniform', 'milk can', 'minibus', 'miniskirt', 'minivan', 'missile',
    'mitten', 'mixing bowl', 'mobile home', 'Model T', 'modem', 'monastery', 'monitor', 'moped', 'mortar',
    'mortarboard', 'mosque', 'mosquito net', 'motor scooter', 'mountain bike', 'mountain tent', 'mouse',
    'mousetrap', 'moving van', 'muzzle', 'nail', 'neck brace', 'necklace', 'nipple', 'notebook', 'obelisk', 'oboe',
    'ocarina', 'odometer', 'oil filter', 'organ', 'oscilloscope', 'overskirt', 'oxcart', 'oxygen mask', 'packet',
    'paddle', 'paddlewheel', 'padlock', 'paintbrush', 'pajama', 'palace', 'panpipe', 'paper towel', 'parachute',
    'parallel bars', 'park bench', 'parking meter', 'passenger car', 'patio', 'pay-phone', 'pedestal', 'pencil box',
    'pencil sharpener', 'perfume', 'Petri dish', 'photocopier', 'pick', 'pickelhaube', 'picket fence', 'pickup',
    'pier', 'piggy bank', 'pill bottle', 'pillow', 'ping-pong ball', 'pinwheel', 'pirate', 'pitcher', 'plane',
    'planetarium', 'plastic bag', 'plate rack', 'plow', 'plunger', 'Polaroid camera', 'pole', 'police van',
    'poncho', 'pool table', 'pop bottle', 'pot', "potter's wheel", 'power drill', 'prayer rug', 'printer', 'prison',
    'projectile', 'projector', 'puck', 'punching bag', 'purse', 'quill', 'quilt', 'racer', 'racket', 'radiator',
    'radio', 'radio telescope', 'rain barrel', 'recreational vehicle', 'reel', 'reflex camera', 'refrigerator',
    'remote control', 'restaurant', 'revolver', 'rifle', 'rocking chair', 'rotisserie', 'rubber eraser',
    'rugby ball', 'rule', 'running shoe', 'safe', 'safety pin', 'saltshaker', 'sandal', 'sarong', 'sax', 'scabbard',
    'scale', 'school bus', 'schooner', 'scoreboard', 'screen', 'screw', 'screwdriver', 'seat belt',
    'sewing machine', 'shield', 'shoe shop', 'shoji', 'shopping basket', 'shopping cart', 'shovel', 'shower cap',
    'shower curtain', 'ski', 'ski mask', 'sleeping bag', 'slide rule', 'sliding door', 'slot', 'snorkel',
    'snowmobile', 'snowplow', 'soap dispenser', 'soccer ball', 'sock', 'solar dish', 'sombrero', 'soup bowl',
    'space bar', 'space heater', 'space shuttle', 'spatula', 'speedboat', 'spider web', 'spindle', 'sports car',
    'spotlight', 'stage', 'steam locomotive', 'steel arch bridge', 'steel drum', 'stethoscope', 'stole',
    'stone wall', 'stopwatch', 'stove', 'strainer', 'streetcar', 'stretcher', 'studio couch', 'stupa', 'submarine',
    'suit', 'sundial', 'sunglass', 'sunglasses', 'sunscreen', 'suspension bridge', 'swab', 'sweatshirt',
    'swimming trunks', 'swing', 'switch', 'syringe', 'table lamp', 'tank', 'tape player', 'teapot', 'teddy',
    'television', 'tennis ball', 'thatch', 'theater curtain', 'thimble', 'thresher', 'throne', 'tile roof',
    'toaster', 'tobacco shop', 'toilet seat', 'torch', 'totem pole', 'tow truck', 'toyshop', 'tractor',
    'trailer truck', 'tray', 'trench coat', 'tricycle', 'trimaran', 'tripod', 'triumphal arch', 'trolleybus',
    'trombone', 'tub', 'turnstile', 'typewriter keyboard', 'umbrella', 'unicycle', 'upright', 'vacuum', 'vase',
    'vault', 'velvet', 'vending machine', 'vestment', 'viaduct', 'violin', 'volleyball', 'waffle iron',
    'wall clock', 'wallet', 'wardrobe', 'warplane', 'washbasin', 'washer', 'water bottle', 'water jug',
    'water tower', 'whiskey jug', 'whistle', 'wig', 'window screen', 'window shade', 'Windsor tie', 'wine bottle',
    'wing', 'wok', 'wooden spoon', 'wool', 'worm fence', 'wreck', 'yawl', 'yurt', 'web site', 'comic book',
    'crossword puzzle', 'street sign', 'traffic light', 'book jacket', 'menu', 'plate', 'guacamole', 'consomme',
    'hot pot', 'trifle', 'ice cream', 'ice lolly', 'French loaf', 'bagel', 'pretzel', 'cheeseburger', 'hotdog',
    'mashed potato', 'head cabbage', 'broccoli', 'cauliflower', 'zucchini', 'spaghetti squash', 'acorn squash',
    'butternut squash', 'cucumber', 'artichoke', 'bell pepper', 'cardoon', 'mushroom', 'Granny Smith', 'strawberry',
    'orange', 'lemon', 'fig', 'pineapple', 'banana', 'jackfruit', 'custard apple', 'pomegranate', 'hay',
    'carbonara', 'chocolate sauce', 'dough', 'meat loaf', 'pizza', 'potpie', 'burrito', 'red wine', 'espresso',
    'cup', 'eggnog', 'alp', 'bubble', 'cliff', 'coral reef', 'geyser', 'lakeside', 'promontory', 'sandbar',
    'seashore', 'valley', 'volcano', 'ballplayer', 'groom', 'scuba diver', 'rapeseed', 'daisy',
    "yellow lady's slipper", 'corn', 'acorn', 'hip', 'buckeye', 'coral fungus', 'agaric', 'gyromitra', 'stinkhorn',
    'earthstar', 'hen-of-the-woods', 'bolete', 'ear', 'toilet tissue',
)

# (first, last) inclusive index ranges of classes that share a plain kind: rendered "a dog (beagle)".
_KIND_RANGES: tuple[tuple[int, int, str], ...] = (
    (0, 1, "fish"), (2, 4, "shark"), (5, 6, "ray"), (9, 24, "bird"), (25, 29, "salamander"), (30, 32, "frog"),
    (33, 37, "turtle"), (38, 48, "lizard"), (49, 50, "crocodile"), (52, 68, "snake"), (72, 77, "spider"),
    (80, 100, "bird"), (118, 121, "crab"), (122, 124, "lobster"), (127, 146, "bird"), (147, 148, "whale"),
    (151, 268, "dog"), (269, 271, "wolf"), (277, 280, "fox"), (281, 285, "cat"),
    (294, 297, "bear"), (300, 307, "beetle"), (321, 326, "butterfly"), (370, 382, "monkey"),
    (385, 386, "elephant"), (389, 397, "fish"),
)

# Classes of one kind that no range covers (groups only: their plain words are in _PLAIN or their name).
_KIND_SETS: dict[str, tuple[int, ...]] = {
    "chicken": (7, 8),
    "big cat": tuple(range(286, 294)),
    "ape": tuple(range(365, 370)),
    "car": (407, 436, 468, 511, 609, 627, 656, 661, 717, 751, 817),
    "motorbike": (665, 670),
    "bicycle": (444, 671, 870, 880),
    "cup": (504, 967, 968, 969),
    "phone": (487, 528, 707),
    "computer": (527, 590, 620, 664, 681, 782, 851, 916),
    "keyboard": (508, 810, 878),
    "bottle": (440, 720, 737, 898, 907),
    "sunglasses": (836, 837),
    "swimsuit": (445, 638, 639),
    "guitar": (402, 546),
    "aircraft": (404, 895, 908),
    "rocket": (657, 744, 812),
    "boat": (403, 472, 484, 510, 554, 576, 625, 628, 724, 780, 814, 833, 871, 914),
    "truck": (555, 569, 675, 734, 864, 867),
    "bus": (654, 779, 874),
    "train": (466, 547, 565, 705, 820, 829),
    "clock": (409, 530, 531, 826, 892),
    "printed matter": (917, 918, 921, 922),
    "pen": (418, 563, 749),
    "piano": (579, 881),
    "ball": (429, 430, 522, 574, 722, 768, 805, 852, 890),
    "rabbit": (330, 331, 332),
    "camera": (732, 759),
}

# Plain words where the first synonym misleads or reads oddly (keyed by class index).
_PLAIN: dict[int, str] = {
    7: "a rooster", 8: "a hen", 101: "an elephant (tusker)", 134: "a crane (bird)", 263: "a corgi (Pembroke)",
    264: "a corgi (Cardigan)", 282: "a cat (striped tabby)", 330: "a rabbit", 332: "a rabbit (Angora)",
    339: "a horse (sorrel)", 341: "a pig (hog)", 345: "an ox", 383: "a lemur", 399: "an abaya (robe)",
    412: "a trash can", 418: "a ballpoint pen", 419: "a sticking plaster (Band-Aid)", 421: "a banister",
    428: "a wheelbarrow", 436: "a car (station wagon)", 456: "a bow (archery)", 458: "a brass plaque",
    468: "a taxi cab", 474: "a cardigan (sweater)", 480: "a cash machine (ATM)", 487: "a mobile phone",
    493: "a chest of drawers", 504: "a coffee mug", 517: "a crane (construction machine)",
    521: "a slow cooker (Crock-Pot)", 528: "a dial telephone", 553: "a filing cabinet",
    590: "a handheld computer", 592: "a hard disk", 608: "jeans", 610: "a jersey (shirt)", 630: "a loafer (shoe)",
    638: "a swimsuit (maillot)", 639: "a swimsuit (tank suit)", 664: "a computer monitor", 665: "a moped or motorbike",
    666: "a mortar (bowl)", 670: "a motor scooter or motorbike", 673: "a computer mouse", 680: "a baby-bottle teat",
    681: "a notebook computer", 700: "paper towels", 705: "a railway passenger car", 707: "a pay phone",
    657: "a missile or rocket", 714: "a guitar pick", 717: "a pickup truck", 726: "a carpenter's plane",
    737: "a soda bottle", 744: "a projectile (rocket)",
    751: "a race car", 759: "a reflex camera", 769: "a ruler", 776: "a saxophone", 782: "a screen (monitor)",
    800: "a slot machine", 810: "a keyboard (space bar)", 836: "sunglasses", 837: "sunglasses",
    844: "a light switch", 847: "a tank (military)", 850: "a teddy bear", 851: "a television",
    881: "an upright piano", 882: "a vacuum cleaner", 897: "a washing machine", 916: "a website on a screen",
    919: "a street sign", 921: "a book cover", 925: "a clear soup (consomme)", 930: "a French loaf (baguette)",
    948: "a green apple (Granny Smith)", 966: "red wine", 967: "a cup of coffee (espresso)", 968: "a cup",
    969: "a cup of eggnog", 981: "a baseball player", 987: "corn", 989: "rose hips", 998: "an ear of corn",
    999: "toilet paper",
}

# Names read without an article (mass nouns, plurals).
_NO_ARTICLE = frozenset({
    "hay", "wool", "dough", "broccoli", "guacamole", "carbonara", "mashed potato", "chocolate sauce", "velvet",
    "rapeseed", "coral reef", "ice cream", "trifle", "consomme", "sunglasses", "swimming trunks", "hen-of-the-woods",
    "chain mail", "honeycomb", "spaghetti squash", "meat loaf", "binoculars", "corn",
})

_KIND_OF: dict[int, str] = {}
for _first, _last, _kind in _KIND_RANGES:
    for _i in range(_first, _last + 1):
        _KIND_OF[_i] = _kind
for _kind, _indices in _KIND_SETS.items():
    for _i in _indices:
        _KIND_OF[_i] = _kind


def _article(phrase: str) -> str:
    if phrase in _NO_ARTICLE:
        return phrase
    return ("an " if phrase[0].lower() in "aeiou" else "a ") + phrase


def group(index: int) -> str:
    """What this class shares with its sisters ("dog", "motorbike"), or its own name where nothing is shared."""
    return _KIND_OF.get(index, IMAGENET_CLASSES[index])


def plain(index: int) -> str:
    """A short English phrase for one class: "a dog (beagle)", "a moped", "a cup of coffee (espresso)"."""
    if index in _PLAIN:
        return _PLAIN[index]
    name = IMAGENET_CLASSES[index]
    kind = _KIND_OF.get(index)
    if kind and kind not in _KIND_SETS and kind.lower() not in name.lower():
        return f"{_article(kind)} ({name})"
    return _article(name)
